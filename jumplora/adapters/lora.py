"""Plain LoRA (IncLoRA, ELLA): K copies of a LoRA update in each adapted linear, computed as PEFT's LoRA layer
computes one (its start drawn as PEFT draws it, its forward and merge op for op), so a run's numbers are those of PEFT
without loading it. `LoraAdapter` is the base of the JumpLoRA adapter (`adapters.jumplora`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from jumplora.adapters.base import Factors, find_targets
from jumplora.config import LoraConfig
from jumplora.errors import DivergedError


class LoraLinear(nn.Module):
    """A frozen `nn.Linear` W plus K copies of a LoRA update, copy k as PEFT's layer computes one:

        y = x W^T + b + β · dropout(x) A_k^T B_k^T      A_k: (r, d_in), B_k: (d_out, r), β = alpha / r

    `route` says what the input holds (`AdapterCopies.route`): k, copy k's rows alone (`copy_forward`, op for op as
    one adapter alone); None, the K copies in blocks (`copies_forward`: W's product once over all of them, each copy's
    update on its own rows)."""

    reads_weight = False  # W is read through its own product (so a bf16 copy of W serves it: `precision`)

    def __init__(self, base_layer: nn.Linear, a: torch.Tensor, b: torch.Tensor, scaling: float, dropout: float,
                 copies: int) -> None:
        super().__init__()
        self.base_layer = base_layer
        # each copy a parameter of its own: its AdamW step and clipping act on the very tensors of one adapter alone
        self.lora_A = nn.ParameterList([nn.Parameter(a.clone()) for _ in range(copies)])  # K × (r, d_in)
        self.lora_B = nn.ParameterList([nn.Parameter(b.clone()) for _ in range(copies)])  # K × (d_out, r)
        self.scaling, self.copies = scaling, copies
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.route: int | None = 0

    @staticmethod
    def start(base_layer: nn.Linear, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B as PEFT's layer starts them, with its RNG draws: on the CPU, nn.Linear's own Kaiming-uniform init of
        A (r, d_in) and of B (d_out, r), then A's again and B = 0; moved to W's device and dtype."""
        a, b = torch.empty(rank, base_layer.in_features), torch.empty(base_layer.out_features, rank)
        for weight in (a, b, a):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        weight = base_layer.weight
        return a.to(weight.device, weight.dtype), b.zero_().to(weight.device, weight.dtype)

    def delta(self, k: int) -> torch.Tensor:
        """ΔW_k = B_k A_k, (d_out, d_in)."""
        return self.lora_B[k] @ self.lora_A[k]

    def dropped(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x) if self.dropout is not None else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.copies_forward(x) if self.route is None else self.copy_forward(self.route, x)

    def copy_forward(self, k: int, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.added(k, self.dropped(x.to(self.lora_A[k].dtype)))  # x cast as PEFT casts it

    def copies_forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        parts = self.dropped(x.to(self.lora_A[0].dtype)).chunk(self.copies)
        return result + torch.cat([self.added(k, h) for k, h in enumerate(parts)])

    def added(self, k: int, h: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(h, self.lora_A[k]), self.lora_B[k]) * self.scaling

    def final_update(self, k: int) -> torch.Tensor:
        """β ΔW_k, what PEFT's merge adds to W."""
        with torch.no_grad():
            return self.delta(k) * self.scaling


class LoraAdapter:
    """K copies of a fresh LoRA on `model`'s target linears for one task (`AdapterCopies`); merged after it."""

    stacks = True

    def __init__(self, model: nn.Module, config: LoraConfig, total_steps: int, copies: int = 1) -> None:
        self.model, self.total_steps, self.copies = model, total_steps, copies
        self.errors: dict[int, DivergedError] = {}
        model.requires_grad_(False)  # only the adapter trains (as PEFT leaves a model)
        self.layers = self.new_layers(find_targets(model, config.target_modules), config)
        for name, layer in self.layers.items():
            model.set_submodule(name, layer)
        self.updates: list[dict[str, torch.Tensor]] = []

    def new_layers(self, targets: dict[str, nn.Linear], config: LoraConfig) -> dict[str, LoraLinear]:
        """The adapted layers, their starts drawn in the order of `targets` (PEFT's order: the model's modules)."""
        return {name: LoraLinear(base, *LoraLinear.start(base, config.rank), config.alpha / config.rank,
                                 config.lora_dropout, self.copies) for name, base in targets.items()}

    def trainable_parameters(self, k: int) -> list[nn.Parameter]:
        return [p for layer in self.layers.values() for p in (layer.lora_A[k], layer.lora_B[k])]

    @contextmanager
    def route(self, k: int | None) -> Iterator[None]:
        for layer in self.layers.values():
            layer.route = k
        try:
            yield
        finally:
            for layer in self.layers.values():
                layer.route = 0

    def before_step(self, step: int) -> None:
        """Plain LoRA has no schedule."""

    def after_step(self, step: int) -> None:
        """Plain LoRA has no threshold."""

    def factors(self, k: int) -> dict[str, Factors]:
        """ΔW_k = B_k A_k per module, built when asked (a plain LoRA has no mask)."""
        return {name: Factors(a=layer.lora_A[k], b=layer.lora_B[k], scaling=layer.scaling,
                              delta=partial(layer.delta, k), mask=lambda: None) for name, layer in self.layers.items()}

    def thresholds(self) -> list[dict[str, float]]:
        return [{} for _ in range(self.copies)]

    def finish(self) -> list[dict[str, torch.Tensor]]:
        """Each copy's β ΔW_final, and the plain linears back (their weights untouched by training)."""
        self.updates = [{name: layer.final_update(k) for name, layer in self.layers.items()}
                        for k in range(self.copies)]
        for name, layer in self.layers.items():
            self.model.set_submodule(name, layer.base_layer)
        return self.updates

    def merge(self, k: int) -> None:
        with torch.no_grad():
            for name, update in self.updates[k].items():
                weight = self.layers[name].base_layer.weight
                weight.add_(update.to(weight.dtype))
