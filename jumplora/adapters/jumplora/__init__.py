"""JumpLoRA: LoRA updates sparsified by a learnable JumpReLU threshold (SPEC §1)."""

from jumplora.adapters.jumplora.layer import JumpLoraLinear, ThresholdGroup
from jumplora.adapters.jumplora.model import JumpLoraAdapter, block_of

__all__ = ["JumpLoraAdapter", "JumpLoraLinear", "ThresholdGroup", "block_of"]
