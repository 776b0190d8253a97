"""JumpLoRA: LoRA updates sparsified by a learnable JumpReLU threshold (SPEC §1)."""

from jumplora.adapters.jumplora.config import JumpLoraConfig
from jumplora.adapters.jumplora.layer import JumpLoraLinear, ThresholdGroup
from jumplora.adapters.jumplora.model import JUMPLORA, JumpLoraAdapter, block_of, find_targets

__all__ = ["JUMPLORA", "JumpLoraAdapter", "JumpLoraConfig", "JumpLoraLinear", "ThresholdGroup", "block_of",
           "find_targets"]
