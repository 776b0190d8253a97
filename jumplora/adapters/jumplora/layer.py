"""The JumpLoRA linear layer and the learnable threshold shared by a group of layers."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from jumplora.ops import symmetric_jump


class ThresholdGroup(nn.Module):
    """One learnable τ = exp(log τ) (fp32) shared by the layers of a group, and the group's current γ."""

    def __init__(self) -> None:
        super().__init__()
        self.log_tau = nn.Parameter(torch.zeros((), dtype=torch.float32))
        self.gamma = 0.0
        self.initialized = False

    @property
    def tau(self) -> torch.Tensor:
        return self.log_tau.exp()

    def set_tau(self, tau: float) -> None:
        with torch.no_grad():
            self.log_tau.fill_(math.log(tau))
        self.initialized = True


class JumpLoraLinear(nn.Module):
    """A frozen `nn.Linear` W plus a JumpLoRA update (SPEC §1).

        ΔW = B A                        A: (r, d_in) Kaiming-uniform, B: (d_out, r) zeros, so ΔW = 0 at start
        ΔW_jump = ΔW · 1[|ΔW| > τ]      = JumpReLU_τ(ΔW) − JumpReLU_τ(−ΔW), straight-through gradients to ΔW and τ
        ΔW_interp = γ ΔW_jump + (1 − γ) ΔW
        y = x (W + β ΔW_interp)^T + b   β = alpha / r

    γ comes from the adapter's schedule (SPEC §1: γ(s) = 0 for s ≤ S_start, then min(1, (s − S_start) /
    (S_final − S_start))); with `authors_compat` it lags one step as in the authors' code: γ_compat(s) = γ(s − 1).
    The update is built once per forward and added to W, so the layer costs one matmul over the tokens.
    """

    def __init__(self, base_layer: nn.Linear, r: int, scaling: float, group: ThresholdGroup, bandwidth: float,
                 reduction: str, dropout: float) -> None:
        super().__init__()
        self.base_layer = base_layer
        weight = base_layer.weight
        self.lora_A = nn.Parameter(torch.empty(r, base_layer.in_features, dtype=weight.dtype, device=weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base_layer.out_features, r, dtype=weight.dtype, device=weight.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = scaling
        self.bandwidth = bandwidth
        self.reduction = reduction
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        object.__setattr__(self, "group", group)  # shared, so not registered as a child of every layer
        self.last_delta: torch.Tensor | None = None

    def delta(self) -> torch.Tensor:
        """ΔW = B A, shape (d_out, d_in)."""
        return self.lora_B @ self.lora_A

    def interpolated(self, delta: torch.Tensor) -> torch.Tensor:
        gamma = self.group.gamma
        if gamma == 0.0:  # τ not in use: skip the jump (train_task gives log τ its exact zero gradient instead)
            return delta
        jump = symmetric_jump(delta, self.group.tau, self.bandwidth, self.reduction)
        return jump if gamma == 1.0 else torch.lerp(delta, jump, gamma)  # γ jump + (1 − γ) ΔW in one pass

    def hard_mask(self, delta: torch.Tensor) -> torch.Tensor:
        """1[|ΔW| > τ] without gradient (used by the ELLA penalty and the final merge)."""
        return delta.detach().abs() > self.group.tau.detach().to(delta.dtype)

    def _adapted_weight(self) -> torch.Tensor:
        """W + β ΔW_interp (one pass), or β ΔW_interp alone when dropout needs the separate matmul."""
        delta = self.delta()
        self.last_delta = delta  # reused by the ELLA penalty of this step: ΔW is built once per step
        if self.dropout is None:
            return torch.add(self.base_layer.weight, self.interpolated(delta), alpha=self.scaling)
        return self.scaling * self.interpolated(delta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):  # bf16 training: ΔW, |ΔW| > τ and τ stay in fp32
            with torch.autocast(x.device.type, enabled=False):
                weight = self._adapted_weight()
        else:
            weight = self._adapted_weight()
        if self.dropout is None:
            return F.linear(x, weight.to(x.dtype), self.base_layer.bias)
        return self.base_layer(x) + F.linear(self.dropout(x), weight.to(x.dtype))

    def final_update(self) -> torch.Tensor:
        """β · ΔW_final with ΔW_final = ΔW ⊙ H(|ΔW| − τ) (no threshold if τ was never set)."""
        with torch.no_grad():
            delta = self.delta()
            if self.group.initialized:
                delta = delta * self.hard_mask(delta)
            return self.scaling * delta
