"""Attach K copies of JumpLoRA layers to a model, drive the γ/τ schedule of every copy, and merge back to a plain
model."""

from __future__ import annotations

import math

import torch
from torch import nn

from jumplora.adapters.base import Factors
from jumplora.adapters.jumplora.layer import JumpLoraLinear, ThresholdGroup
from jumplora.adapters.lora import LoraAdapter
from jumplora.config import JumpLoraConfig
from jumplora.errors import DivergedError, JumpLoRAError
from jumplora.ops import jump_schedule, schedule_bounds, threshold_for_count

GLOBAL_GROUP = "global"


def block_of(module_name: str) -> str:
    """The transformer block a module belongs to: the path up to its first numeric component.

    `encoder.block.3.layer.0.SelfAttention.q` → `encoder.block.3`; encoder and decoder blocks are distinct groups.
    """
    parts = module_name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    raise JumpLoRAError(f"cannot find the transformer block of module {module_name!r} for per_block thresholds")


class JumpLoraAdapter(LoraAdapter):
    """K copies of a fresh JumpLoRA adapter on `model` for one task (`AdapterCopies`), one schedule for all: γ of each
    step, and right after step S_start τ by count per copy and group.

    Copy k's parameters are `….q.lora_A.k`, `….q.lora_B.k` and its thresholds' `log_tau.k` (`self.groups`), so
    `trainable_parameters(k)` is exactly what copy k trains.

    With `config.authors_compat` it follows the authors' code instead of SPEC §1–§2 in three places (γ and the sparse
    ELLA mask lag one step, τ by count keeps n − 1 entries in `global` mode: docs/DECISIONS.md, `--authors-compat`).
    """

    def __init__(self, model: nn.Module, config: JumpLoraConfig, total_steps: int, copies: int = 1) -> None:
        self.config = config
        self.s_start, self.s_final = schedule_bounds(total_steps, config.jump_start, config.jump_final)
        self.lag = 1 if config.authors_compat else 0  # the authors' γ (and ELLA mask) lag one step
        self.groups: dict[str, ThresholdGroup] = {}
        self.step = 0  # the optimizer step in progress (`before_step`)
        super().__init__(model, config, total_steps, copies)

    def new_layers(self, targets: dict[str, nn.Linear], config: JumpLoraConfig) -> dict[str, JumpLoraLinear]:
        """The layers and their threshold groups, checked before any is attached."""
        group_of = {name: GLOBAL_GROUP if config.threshold == "global" else block_of(name) for name in targets}
        for group_name in dict.fromkeys(group_of.values()):
            members = [base for name, base in targets.items() if group_of[name] == group_name]
            entries = sum(base.weight.numel() for base in members)
            lora = sum(config.rank * (base.in_features + base.out_features) for base in members)
            if entries <= lora:
                raise JumpLoRAError(
                    f"threshold group {group_name!r} has {entries} weight entries but {lora} LoRA parameters: "
                    "sparsification is pointless; use a smaller rank or a larger model"
                )
            self.groups[group_name] = ThresholdGroup(self.copies, members[0].weight.device)
        return {name: JumpLoraLinear(base, config.rank, config.scaling, self.groups[group_of[name]], config.bandwidth,
                                     config.tau_reduction, config.jump_dropout, self.copies)
                for name, base in targets.items()}

    def trainable_parameters(self, k: int) -> list[nn.Parameter]:
        return super().trainable_parameters(k) + [group.log_tau[k] for group in self.groups.values()]

    def factors(self, k: int) -> dict[str, Factors]:
        """ΔW_k per module as this step's forward built it (`last_delta`, not a second B A), and its hard mask
        1[|ΔW_k| > τ_k] once the jump is in effect: after step S_start (S_start + 1 with `authors_compat`, whose mask
        lags one step as its γ)."""
        masked = self.step > self.s_start + self.lag
        return {name: jump_factors(layer, k, masked) for name, layer in self.layers.items()}

    def before_step(self, step: int) -> None:
        """Set γ for optimizer step `step` (1-based)."""
        self.step = step
        gamma = jump_schedule(step, self.total_steps, self.config.jump_start, self.config.jump_final, self.lag)
        for group in self.groups.values():
            group.gamma = gamma

    def after_step(self, step: int) -> None:
        """Right after optimizer step S_start: τ per copy and group by count (kept entries = LoRA parameters; the
        authors' code, `authors_compat`, keeps one fewer in `global` mode). A copy whose ΔW is not finite fails alone
        (`errors`, its log τ NaN) and trains on, apart, to the end."""
        if step != self.s_start:
            return
        with torch.no_grad():
            for group in self.groups.values():
                members = [layer for layer in self.layers.values() if layer.group is group]
                n_lora = sum(layer.lora_A[0].numel() + layer.lora_B[0].numel() for layer in members)
                if self.config.authors_compat and self.config.threshold == "global":
                    n_lora -= 1  # the authors' off-by-one of the global count
                for k in range(self.copies):
                    values = torch.cat([layer.delta(k).abs().reshape(-1) for layer in members])
                    try:
                        group.log_tau[k].fill_(math.log(float(threshold_for_count(values, n_lora))))
                    except DivergedError as error:
                        self.errors.setdefault(k, error)
                        group.log_tau[k].fill_(math.nan)
                group.initialized = True

    def thresholds(self) -> list[dict[str, float]]:
        """τ per group of each copy, read back from the device at once (one transfer, not one per group)."""
        values = torch.stack([group.tau(k).detach() for k in range(self.copies) for group in self.groups.values()])
        rows = values.reshape(self.copies, len(self.groups)).cpu().tolist()
        return [dict(zip(self.groups, row, strict=True)) for row in rows]


def jump_factors(layer: JumpLoraLinear, k: int, masked: bool) -> Factors:
    """Copy k's `Factors` of a JumpLoRA layer: ΔW_k is the one this step's forward built."""

    def delta() -> torch.Tensor:
        return layer.last_delta[k] if layer.last_delta[k] is not None else layer.delta(k)

    return Factors(a=layer.lora_A[k], b=layer.lora_B[k], scaling=layer.scaling, delta=delta,
                   mask=(lambda: layer.hard_mask(delta(), k)) if masked else (lambda: None), gamma=layer.group.gamma)
