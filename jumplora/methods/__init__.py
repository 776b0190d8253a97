"""Continual methods (SPEC §2, §7): which adapter trains (`registry`) and what each regulariser adds to the loss and
remembers of past tasks (`ella`, `ewc`, `olora`). One loop runs them all (`jumplora.continual`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from jumplora.methods.ella import Ella, ella_penalty, weighted_penalty
from jumplora.methods.ewc import Ewc
from jumplora.methods.olora import OLora
from jumplora.methods.registry import METHODS, MethodSpec, get_method

if TYPE_CHECKING:
    from jumplora.config import RunConfig


class Regulariser(Protocol):
    """What a method adds to the one loop beyond its adapter. It keeps what it remembers of past tasks in the run's
    `memory` (named tensors on the training device, saved in every checkpoint), so a resumed run goes on exactly."""

    def start_task(self, adapter) -> None:
        """The task's adapter is attached, before the first step (EWC: θ* ← the current weights)."""

    def loss(self, adapter, step: int, lam: float) -> torch.Tensor | None:
        """The term added to this step's CE (with gradient), or None when there is none."""

    def after_task(self, ws, t: int, record, shard) -> None:
        """Task t is trained and merged: remember what the next tasks are weighed against."""


def make_regulariser(config: RunConfig, memory: dict[str, torch.Tensor]) -> Regulariser | None:
    """The regulariser of `config.method` over the run's `memory`, or None for a method with plain CE."""
    kind = get_method(config.method).regulariser
    if kind == "ella":
        return Ella(memory, config.ella_delta)
    if kind == "ewc":
        return Ewc(memory, fisher_samples=config.ewc_fisher_samples, seed=config.seed)
    if kind == "o-lora":
        return OLora(memory, lambda1=config.olora_lambda1, lambda2=config.olora_lambda2)
    return None


__all__ = ["METHODS", "Ella", "Ewc", "MethodSpec", "OLora", "Regulariser", "ella_penalty",
           "get_method", "make_regulariser", "weighted_penalty"]
