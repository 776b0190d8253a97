"""JumpLoRA: sparse LoRA adapters for continual learning of language models."""

# the method registry (declarations, no torch) loads first, so that every RunConfig knows the same methods whatever
# a process imported before building it (`config.use_registry`)
from jumplora import methods  # noqa: F401

__version__ = "0.1.0"
