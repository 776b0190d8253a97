"""Adapters behind one protocol: attach to a model for one task, step, give ELLA deltas, merge back (full fine-tuning
of every weight too, for EWC and SeqFT)."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from jumplora.adapters.full import FullConfig, FullFineTune
from jumplora.adapters.jumplora import JumpLoraAdapter, JumpLoraConfig
from jumplora.adapters.lora import PeftLoraAdapter, PlainLoraConfig


class TaskAdapter(Protocol):
    """What the continual loop needs from an adapter: one instance per task."""

    def trainable_parameters(self) -> list[nn.Parameter]: ...

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int) -> None: ...

    def lora_factors(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(A (r, d_in), B (d_out, r)) per adapted module: the trained parameters themselves (O-LoRA's terms)."""
        ...

    def ella_penalty(self, mode: str, step: int, past: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def thresholds(self) -> dict[str, float]: ...

    def merge(self) -> dict[str, torch.Tensor]: ...


__all__ = ["FullConfig", "FullFineTune", "JumpLoraAdapter", "JumpLoraConfig", "PeftLoraAdapter", "PlainLoraConfig",
           "TaskAdapter"]
