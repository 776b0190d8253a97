"""A fresh adapter per task on plain CE, merged after it: IncLoRA and JumpLoRA+IncLoRA (SPEC §2), and SeqFT, every
weight trained (SPEC §7). Each is also how an a0 of its adapter kind is trained (`registry.plain_method`)."""

from jumplora.adapters import FULL, JUMPLORA, LORA
from jumplora.methods.registry import MethodSpec, register

register(MethodSpec("inclora", adapter=LORA))
register(MethodSpec("jumplora+inclora", adapter=JUMPLORA))
register(MethodSpec("seqft", adapter=FULL))
