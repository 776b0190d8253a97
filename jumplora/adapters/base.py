"""What the continual loop and the methods need from an adapter: one `TaskAdapter` per task, its `Factors`, and the
`AdapterKind` a method names (how the adapter is built from a `RunConfig`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from jumplora.config import RunConfig
from jumplora.families import DEFAULT_TARGET_MODULES, SEQ2SEQ, family_of


@dataclass(frozen=True)
class Factors:
    """One adapted module's low-rank update in the current step (SPEC §1): ΔW = B A, applied as β · ΔW_eff with
    ΔW_eff = ΔW until the jump is in effect, then γ · (ΔW ⊙ mask) + (1 − γ) · ΔW (plain LoRA: never; `mask` gives
    None). A method builds its own terms from these (ELLA's P, O-LoRA's orthogonality)."""

    a: torch.Tensor  # lora_A (r, d_in): the trained parameter itself
    b: torch.Tensor  # lora_B (d_out, r)
    scaling: float  # β = alpha / r
    delta: Callable[[], torch.Tensor]  # ΔW = B A (d_out, d_in), with gradient (JumpLoRA: this step's forward's)
    mask: Callable[[], torch.Tensor | None]  # 1[|ΔW| > τ] (bool, no gradient) once the jump is in effect, else None
    gamma: float = 0.0  # γ of this step: the masked share of ΔW_eff


class TaskAdapter(Protocol):
    """What the continual loop needs from an adapter: one instance per task, on `model`."""

    model: nn.Module

    def trainable_parameters(self) -> list[nn.Parameter]: ...

    def before_step(self, step: int) -> None:
        """Before optimizer step `step` (1-based): e.g. γ of the schedule."""

    def after_step(self, step: int) -> None:
        """After optimizer step `step`: e.g. τ by count after S_start."""

    def factors(self) -> dict[str, Factors]:
        """The low-rank update of every adapted module, by module path ({} when every weight trains)."""
        ...

    def thresholds(self) -> dict[str, float]: ...

    def merge(self) -> dict[str, torch.Tensor]:
        """W ← W + the task's update; a plain model again. Returns the update per target module (on its device)."""
        ...


def targets(config: RunConfig, model: nn.Module) -> tuple[str, ...]:
    """The adapted linear layers of `model`: `config.target_modules`, else the model family's default."""
    return config.target_modules or DEFAULT_TARGET_MODULES[family_of(model)]


@dataclass(frozen=True)
class AdapterKind:
    """How a method trains one task (`MethodSpec.adapter`). `adapter(model, settings, total_steps)` attaches a fresh
    adapter; its `settings` dataclass is built from the run's `RunConfig` (`configure`): each of its fields takes the
    RunConfig field of the same name, so an adapter has no defaults of its own. `fields` are the RunConfig fields
    that shape it (an a0 of this kind is keyed by them, `continual.single_task_config`); `whole_model`: no adapter,
    every weight trains (its learning rate is `full_lr`, and a checkpoint keeps the whole model)."""

    name: str
    adapter: Callable[[nn.Module, object, int], TaskAdapter]
    settings: type
    fields: tuple[str, ...]
    whole_model: bool = False

    def configure(self, config: RunConfig, target_modules: tuple[str, ...]):
        """The adapter's settings (validated by their `__post_init__`) from `config`, for these target modules."""
        names = [field.name for field in dataclasses.fields(self.settings) if field.name != "target_modules"]
        return self.settings(target_modules=target_modules, **{name: getattr(config, name) for name in names})

    def build(self, model: nn.Module, config: RunConfig, total_steps: int) -> TaskAdapter:
        """A fresh adapter of this kind on `model` for a task of `total_steps` optimizer steps."""
        return self.adapter(model, self.configure(config, targets(config, model)), total_steps)

    def check(self, config: RunConfig) -> None:
        """Refuse settings this adapter cannot take (rank, alpha, schedule...) before anything loads."""
        self.configure(config, config.target_modules or DEFAULT_TARGET_MODULES[SEQ2SEQ])

    def lr(self, config: RunConfig) -> float:
        """The optimizer's learning rate: `full_lr` when every weight trains, else `lr`."""
        return config.full_lr if self.whole_model else config.lr
