"""MTL (SPEC §7): one LoRA trained once on the union of the order's tasks, shuffled: the multi-task upper bound."""

from jumplora.adapters import LORA
from jumplora.methods.registry import MethodSpec, register

register(MethodSpec("mtl", adapter=LORA, joint=True))
