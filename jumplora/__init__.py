"""JumpLoRA: sparse LoRA adapters for continual learning of language models."""

__version__ = "0.1.0"
