"""Attach JumpLoRA layers to a model, drive the γ/τ schedule, and merge back to a plain model."""

from __future__ import annotations

import torch
from torch import nn

from jumplora.adapters.base import AdapterKind, Factors
from jumplora.adapters.jumplora.config import JumpLoraConfig
from jumplora.adapters.jumplora.layer import JumpLoraLinear, ThresholdGroup
from jumplora.errors import JumpLoRAError
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


def find_targets(model: nn.Module, target_modules: tuple[str, ...]) -> dict[str, nn.Linear]:
    """Every `nn.Linear` whose last name component is in `target_modules`, by full module path."""
    found = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules
    }
    if not found:
        raise JumpLoRAError(f"no nn.Linear named {', '.join(target_modules)} in the model: check --target-modules")
    return found


def set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


class JumpLoraAdapter:
    """A fresh JumpLoRA adapter on `model` for one task.

    Parameters are named like PEFT's (`….q.lora_A`, `….q.lora_B`) and the thresholds live in `self.groups`
    (`log_tau` per group), so `trainable_parameters()` is exactly what the optimizer updates.

    With `config.authors_compat` it follows the authors' code instead of SPEC §1–§2 in three places: γ lags one step,
    γ_compat(s) = γ(s − 1) (γ = 0 through S_start + 1, γ = 1 from S_final + 1); the sparse ELLA mask starts at step
    S_start + 2 (not S_start + 1); and τ by count keeps n − 1 entries in `global` mode (n = the group's LoRA
    parameter count; n in `per_block`). τ is still set right after step S_start.
    """

    def __init__(self, model: nn.Module, config: JumpLoraConfig, total_steps: int) -> None:
        self.model = model
        self.config = config
        self.total_steps = total_steps
        self.s_start, self.s_final = schedule_bounds(total_steps, config.jump_start, config.jump_final)
        self.lag = 1 if config.authors_compat else 0  # the authors' γ (and ELLA mask) lag one step
        targets = find_targets(model, config.target_modules)
        device = next(iter(targets.values())).weight.device
        self.groups: dict[str, ThresholdGroup] = {}
        self.layers: dict[str, JumpLoraLinear] = {}
        for name, base in targets.items():
            group_name = GLOBAL_GROUP if config.threshold == "global" else block_of(name)
            if group_name not in self.groups:
                self.groups[group_name] = ThresholdGroup().to(device)
            layer = JumpLoraLinear(base, config.rank, config.scaling, self.groups[group_name], config.bandwidth,
                                   config.tau_reduction, config.jump_dropout)
            set_submodule(model, name, layer)
            self.layers[name] = layer
        self.step = 0  # the optimizer step in progress (`before_step`)
        self._check_groups_can_sparsify()

    def _members(self, group_name: str) -> list[JumpLoraLinear]:
        return [layer for layer in self.layers.values() if layer.group is self.groups[group_name]]

    def _check_groups_can_sparsify(self) -> None:
        for group_name in self.groups:
            members = self._members(group_name)
            entries = sum(layer.base_layer.weight.numel() for layer in members)
            lora = sum(layer.lora_A.numel() + layer.lora_B.numel() for layer in members)
            if entries <= lora:
                raise JumpLoRAError(
                    f"threshold group {group_name!r} has {entries} weight entries but {lora} LoRA parameters: "
                    "sparsification is pointless; use a smaller rank or a larger model"
                )

    def trainable_parameters(self) -> list[nn.Parameter]:
        params = [p for layer in self.layers.values() for p in (layer.lora_A, layer.lora_B)]
        return params + [group.log_tau for group in self.groups.values()]

    def factors(self) -> dict[str, Factors]:
        """ΔW = B A per module as this step's forward built it, and its hard mask 1[|ΔW| > τ] once the jump is in
        effect: after step S_start (S_start + 1 with `authors_compat`, whose mask lags one step as its γ)."""
        masked = self.step > self.s_start + self.lag
        return {name: jump_factors(layer, masked) for name, layer in self.layers.items()}

    def before_step(self, step: int) -> None:
        """Set γ for optimizer step `step` (1-based)."""
        self.step = step
        gamma = jump_schedule(step, self.total_steps, self.config.jump_start, self.config.jump_final, self.lag)
        for group in self.groups.values():
            group.gamma = gamma

    def after_step(self, step: int) -> None:
        """Right after optimizer step S_start: τ per group by count (kept entries = LoRA parameters; the authors'
        code, `authors_compat`, keeps one fewer in `global` mode)."""
        if step != self.s_start:
            return
        with torch.no_grad():
            for group_name, group in self.groups.items():
                members = self._members(group_name)
                values = torch.cat([layer.delta().abs().reshape(-1) for layer in members])
                n_lora = sum(layer.lora_A.numel() + layer.lora_B.numel() for layer in members)
                if self.config.authors_compat and self.config.threshold == "global":
                    n_lora -= 1  # the authors' off-by-one of the global count
                group.set_tau(float(threshold_for_count(values, n_lora)))

    def thresholds(self) -> dict[str, float]:
        """τ per group, read back from the device at once (one transfer, not one per group)."""
        values = torch.stack([group.tau.detach() for group in self.groups.values()]).cpu().tolist()
        return dict(zip(self.groups, values, strict=True))

    def merge(self) -> dict[str, torch.Tensor]:
        """W ← W + β ΔW_final for every layer; put the plain linears back. Returns β ΔW_final per module."""
        updates = {}
        with torch.no_grad():
            for name, layer in self.layers.items():
                update = layer.final_update()
                layer.base_layer.weight.add_(update.to(layer.base_layer.weight.dtype))
                set_submodule(self.model, name, layer.base_layer)
                updates[name] = update.detach()
        self.layers = {}
        return updates


def jump_factors(layer: JumpLoraLinear, masked: bool) -> Factors:
    """A JumpLoRA layer's `Factors`: ΔW is the one this step's forward built (`last_delta`), not a second B A."""

    def delta() -> torch.Tensor:
        return layer.last_delta if layer.last_delta is not None else layer.delta()

    return Factors(a=layer.lora_A, b=layer.lora_B, scaling=layer.scaling, delta=delta,
                   mask=(lambda: layer.hard_mask(delta())) if masked else (lambda: None), gamma=layer.group.gamma)


JUMPLORA = AdapterKind("jumplora", JumpLoraAdapter, JumpLoraConfig,
                       fields=("rank", "alpha", "threshold", "bandwidth", "tau_reduction", "jump_start", "jump_final",
                               "jump_dropout"))
