"""The JumpLoRA linear layer (K copies of its update) and the learnable thresholds shared by a group of layers."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from jumplora.adapters.lora import LoraLinear
from jumplora.ops import symmetric_jump


class ThresholdGroup(nn.Module):
    """A learnable τ_k = exp(log τ_k) (fp32) per copy, shared by the layers of a group, and the group's current γ (one
    schedule for every copy)."""

    def __init__(self, copies: int, device: torch.device) -> None:
        super().__init__()
        self.log_tau = nn.ParameterList(
            [nn.Parameter(torch.zeros((), dtype=torch.float32, device=device)) for _ in range(copies)])
        self.gamma = 0.0
        self.initialized = False

    def tau(self, k: int) -> torch.Tensor:
        return self.log_tau[k].exp()


class JumpLoraLinear(LoraLinear):
    """A frozen `nn.Linear` W plus K copies of a JumpLoRA update (SPEC §1), copy k:

        ΔW = B A                        A: (r, d_in) Kaiming-uniform, B: (d_out, r) zeros, so ΔW = 0 at start
        ΔW_jump = ΔW · 1[|ΔW| > τ]      = JumpReLU_τ(ΔW) − JumpReLU_τ(−ΔW), straight-through gradients to ΔW and τ
        ΔW_interp = γ ΔW_jump + (1 − γ) ΔW
        y = x (W + β ΔW_interp)^T + b   β = alpha / r

    γ comes from the adapter's schedule (SPEC §1, `ops.jump_schedule`). The update is built once per forward and added
    to W, so the layer costs one matmul over the tokens (with dropout: W's output + dropout(x) (β ΔW_interp)^T).
    Inputs are routed as `LoraLinear`'s.
    """

    def __init__(self, base_layer: nn.Linear, rank: int, scaling: float, group: ThresholdGroup, bandwidth: float,
                 reduction: str, dropout: float, copies: int) -> None:
        weight = base_layer.weight
        a = torch.empty(rank, base_layer.in_features, dtype=weight.dtype, device=weight.device)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        super().__init__(base_layer, a, torch.zeros(base_layer.out_features, rank, dtype=weight.dtype,
                                                    device=weight.device), scaling, dropout, copies)
        self.bandwidth, self.reduction = bandwidth, reduction
        object.__setattr__(self, "group", group)  # shared, so not registered as a child of every layer
        self.last_delta: list[torch.Tensor | None] = [None] * copies  # each copy's ΔW of the last forward

    @property
    def reads_weight(self) -> bool:
        """Without dropout the layer builds W + β ΔW_interp from the fp32 W itself (a bf16 copy of W is of no use)."""
        return self.dropout is None

    def interpolated(self, k: int, delta: torch.Tensor) -> torch.Tensor:
        gamma = self.group.gamma
        if gamma == 0.0:  # τ not in use: skip the jump (train_task gives log τ its exact zero gradient instead)
            return delta
        jump = symmetric_jump(delta, self.group.tau(k), self.bandwidth, self.reduction)
        return jump if gamma == 1.0 else torch.lerp(delta, jump, gamma)  # γ jump + (1 − γ) ΔW in one pass

    def hard_mask(self, delta: torch.Tensor, k: int) -> torch.Tensor:
        """1[|ΔW_k| > τ_k] without gradient (used by the ELLA penalty and the final merge)."""
        return delta.detach().abs() > self.group.tau(k).detach().to(delta.dtype)

    def _adapted_weight(self, k: int) -> torch.Tensor:
        """W + β ΔW_interp (one pass), or β ΔW_interp alone when dropout needs the separate matmul."""
        delta = self.delta(k)
        self.last_delta[k] = delta  # reused by the ELLA penalty of this step: ΔW is built once per step
        if self.dropout is None:
            return torch.add(self.base_layer.weight, self.interpolated(k, delta), alpha=self.scaling)
        return self.scaling * self.interpolated(k, delta)

    def weight(self, k: int, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):  # bf16 training: ΔW, |ΔW| > τ and τ stay in fp32
            with torch.autocast(x.device.type, enabled=False):
                return self._adapted_weight(k)
        return self._adapted_weight(k)

    def copy_forward(self, k: int, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight(k, x)
        if self.dropout is None:
            return F.linear(x, weight.to(x.dtype), self.base_layer.bias)
        return self.base_layer(x) + F.linear(self.dropout(x), weight.to(x.dtype))

    def copies_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout is None:  # W is inside each copy's weight: one product per copy, on its rows
            return torch.cat([self.copy_forward(k, part) for k, part in enumerate(x.chunk(self.copies))])
        weights = [self.weight(k, x) for k in range(self.copies)]
        parts = self.dropout(x).chunk(self.copies)
        added = [F.linear(h, w.to(x.dtype)) for h, w in zip(parts, weights, strict=True)]
        return self.base_layer(x) + torch.cat(added)

    def final_update(self, k: int) -> torch.Tensor:
        """β · ΔW_final with ΔW_final = ΔW ⊙ H(|ΔW| − τ) (no threshold if τ was never set)."""
        with torch.no_grad():
            delta = self.delta(k)
            if self.group.initialized:
                delta = delta * self.hard_mask(delta, k)
            return self.scaling * delta
