"""No adapter: every weight of the model trains for one task (EWC, SeqFT), behind the same protocol as the adapters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from jumplora.adapters.base import AdapterKind, Factors
from jumplora.adapters.jumplora.model import find_targets


@dataclass(frozen=True)
class FullConfig:
    """`target_modules` only name the modules whose change is recorded as the task's update (sparsity, overlap)."""

    target_modules: tuple[str, ...]


class FullFineTune:
    """θ ← θ − AdamW step on every parameter of `model` (tied weights once); at the end of the task the model is
    frozen again. The task's "update" is the change of the target modules' weights, W_end − W_start: the same
    quantity as an adapter's merged β·ΔW_final, so the sparsity and overlap analyses read both alike."""

    def __init__(self, model: nn.Module, config: FullConfig, total_steps: int) -> None:
        self.model = model
        self.total_steps = total_steps
        self.targets = find_targets(model, config.target_modules)
        self.start = {name: module.weight.detach().clone() for name, module in self.targets.items()}
        model.requires_grad_(True)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def factors(self) -> dict[str, Factors]:
        """No low-rank update: every weight trains."""
        return {}

    def before_step(self, step: int) -> None:
        """No schedule."""

    def after_step(self, step: int) -> None:
        """No threshold."""

    def thresholds(self) -> dict[str, float]:
        return {}

    def merge(self) -> dict[str, torch.Tensor]:
        """Nothing to merge: freeze the model and return W_end − W_start of the target modules."""
        self.model.requires_grad_(False)
        return {name: module.weight.detach() - self.start[name] for name, module in self.targets.items()}


FULL = AdapterKind("full", FullFineTune, FullConfig, fields=("full_lr",), whole_model=True)
