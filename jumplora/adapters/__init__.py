"""Adapters behind one protocol (`base.AdapterCopies`): K ≥ 1 copies of a task's adapter attached to a model, stepped,
exposing each copy's factors to its method (`base.TaskAdapter`), taken off and merged back; full fine-tuning of every
weight too (EWC, SeqFT). A method names the kind it trains with (`jumplora.adapter_kinds.AdapterKind`, re-exported
here for plugins): `LORA`, `JUMPLORA` or `FULL`."""

from jumplora.adapter_kinds import FULL, JUMPLORA, LORA, AdapterKind, targets
from jumplora.adapters.base import AdapterCopies, CopyView, Factors, TaskAdapter, find_targets
from jumplora.adapters.full import FullFineTune
from jumplora.adapters.jumplora import JumpLoraAdapter
from jumplora.adapters.lora import LoraAdapter
from jumplora.config import FullConfig, JumpLoraConfig, LoraConfig

__all__ = ["FULL", "JUMPLORA", "LORA", "AdapterCopies", "AdapterKind", "CopyView", "Factors", "FullConfig",
           "FullFineTune", "JumpLoraAdapter", "JumpLoraConfig", "LoraAdapter", "LoraConfig", "TaskAdapter",
           "find_targets", "targets"]
