"""Adapters behind one protocol (`base.TaskAdapter`): attach to a model for one task, step, expose the update's
factors, merge back; full fine-tuning of every weight too (EWC, SeqFT). A method names the kind it trains with
(`base.AdapterKind`): `LORA`, `JUMPLORA` or `FULL`."""

from jumplora.adapters.base import AdapterKind, Factors, TaskAdapter, targets
from jumplora.adapters.full import FULL, FullConfig, FullFineTune
from jumplora.adapters.jumplora import JUMPLORA, JumpLoraAdapter, JumpLoraConfig
from jumplora.adapters.lora import LORA, PeftLoraAdapter, PlainLoraConfig

__all__ = ["FULL", "JUMPLORA", "LORA", "AdapterKind", "Factors", "FullConfig", "FullFineTune", "JumpLoraAdapter",
           "JumpLoraConfig", "PeftLoraAdapter", "PlainLoraConfig", "TaskAdapter", "targets"]
