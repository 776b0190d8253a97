"""No adapter: every weight of the model trains for one task (EWC, SeqFT), behind the same protocol as the adapters."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from jumplora.adapters.base import Factors, find_targets
from jumplora.config import FullConfig
from jumplora.errors import DivergedError, JumpLoRAError


class FullFineTune:
    """θ ← θ − AdamW step on every parameter of `model` (tied weights once); at the end of the task the model is
    frozen again. The task's "update" is the change of the target modules' weights, W_end − W_start: the same
    quantity as an adapter's merged β·ΔW_final, so the sparsity and overlap analyses read both alike. It does not
    stack (K copies of every weight would be K models): one copy, its λ alone."""

    stacks = False

    def __init__(self, model: nn.Module, config: FullConfig, total_steps: int, copies: int = 1) -> None:
        if copies != 1:
            raise JumpLoRAError("full fine-tuning trains one λ at a time: it has no copies of its weights")
        self.model, self.total_steps, self.copies = model, total_steps, copies
        self.errors: dict[int, DivergedError] = {}
        self.targets = find_targets(model, config.target_modules)
        self.start = {name: module.weight.detach().clone() for name, module in self.targets.items()}
        model.requires_grad_(True)

    def trainable_parameters(self, k: int) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def route(self, k: int | None) -> nullcontext:
        """One copy: the model's own forward."""
        return nullcontext()

    def factors(self, k: int) -> dict[str, Factors]:
        """No low-rank update: every weight trains."""
        return {}

    def before_step(self, step: int) -> None:
        """No schedule."""

    def after_step(self, step: int) -> None:
        """No threshold."""

    def thresholds(self) -> list[dict[str, float]]:
        return [{}]

    def finish(self) -> list[dict[str, torch.Tensor]]:
        """Freeze the model, which keeps its trained weights (merged already): W_end − W_start of its targets."""
        self.model.requires_grad_(False)
        return [{name: module.weight.detach() - self.start[name] for name, module in self.targets.items()}]

    def merge(self, k: int) -> None:
        """Nothing to merge: the model holds its trained weights."""
