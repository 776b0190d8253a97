"""Adapters behind one protocol: attach to a model for one task, step, give ELLA deltas, merge back."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from jumplora.adapters.jumplora import JumpLoraAdapter, JumpLoraConfig
from jumplora.adapters.lora import PeftLoraAdapter, PlainLoraConfig


class TaskAdapter(Protocol):
    """What the continual loop needs from an adapter: one instance per task."""

    def trainable_parameters(self) -> list[nn.Parameter]: ...

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int) -> None: ...

    def ella_penalty(self, mode: str, step: int, past: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def thresholds(self) -> dict[str, float]: ...

    def merge(self) -> dict[str, torch.Tensor]: ...


__all__ = ["JumpLoraAdapter", "JumpLoraConfig", "PeftLoraAdapter", "PlainLoraConfig", "TaskAdapter"]
