"""The continual methods as data: which adapter trains, what the loss adds (and remembers), how λ is chosen."""

from __future__ import annotations

from dataclasses import dataclass

from jumplora.errors import JumpLoRAError

ADAPTERS = ("lora", "jumplora", "full")
REGULARISERS = ("ella", "ewc", "o-lora")


@dataclass(frozen=True)
class MethodSpec:
    name: str
    adapter: str  # "lora" (PEFT LoRA), "jumplora", or "full" (no adapter: every weight of the model trains)
    regulariser: str | None = None  # what the loss adds to CE and remembers of past tasks (`jumplora.methods`)
    per_task_lambda: bool = False  # λ_t per task, from a table or the λ grid (SPEC §5): ELLA and EWC
    joint: bool = False  # MTL: one training on the union of the order's tasks instead of one per task

    def __post_init__(self) -> None:
        if self.adapter not in ADAPTERS or self.regulariser not in (*REGULARISERS, None):
            raise JumpLoRAError(f"method {self.name!r}: unknown adapter {self.adapter!r} or regulariser "
                                f"{self.regulariser!r}")


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        # the paper's four (SPEC §2)
        MethodSpec("inclora", adapter="lora"),
        MethodSpec("ella", adapter="lora", regulariser="ella", per_task_lambda=True),
        MethodSpec("jumplora+inclora", adapter="jumplora"),
        MethodSpec("jumplora+ella", adapter="jumplora", regulariser="ella", per_task_lambda=True),
        # the reference baselines (SPEC §7)
        MethodSpec("ewc", adapter="full", regulariser="ewc", per_task_lambda=True),
        MethodSpec("seqft", adapter="full"),
        MethodSpec("o-lora", adapter="lora", regulariser="o-lora"),
        MethodSpec("jumplora+o-lora", adapter="jumplora", regulariser="o-lora"),
        MethodSpec("mtl", adapter="lora", joint=True),
    )
}


def get_method(name: str) -> MethodSpec:
    if name not in METHODS:
        raise JumpLoRAError(f"unknown method {name!r}: choose one of {', '.join(METHODS)}")
    return METHODS[name]
