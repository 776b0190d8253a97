"""The four continual methods of the paper as data: which adapter, and whether ELLA's penalty is added."""

from __future__ import annotations

from dataclasses import dataclass

from jumplora.errors import JumpLoRAError


@dataclass(frozen=True)
class MethodSpec:
    name: str
    adapter: str  # "lora" (PEFT) or "jumplora"
    uses_ella: bool


METHODS: dict[str, MethodSpec] = {
    "inclora": MethodSpec("inclora", adapter="lora", uses_ella=False),
    "ella": MethodSpec("ella", adapter="lora", uses_ella=True),
    "jumplora+inclora": MethodSpec("jumplora+inclora", adapter="jumplora", uses_ella=False),
    "jumplora+ella": MethodSpec("jumplora+ella", adapter="jumplora", uses_ella=True),
}

ELLA_DELTA_MODES = ("sparse", "interpolated")


def get_method(name: str) -> MethodSpec:
    if name not in METHODS:
        raise JumpLoRAError(f"unknown method {name!r}: choose one of {', '.join(METHODS)}")
    return METHODS[name]
