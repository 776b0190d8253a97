"""Configuration of the JumpLoRA adapter, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from jumplora.config import TAU_REDUCTIONS, THRESHOLD_GROUPINGS
from jumplora.errors import JumpLoRAError


@dataclass(frozen=True)
class JumpLoraConfig:
    """rank, alpha and targets as PEFT's LoraConfig; the rest is JumpLoRA's threshold and schedule (SPEC §1). Fields
    are named as the `RunConfig` fields they come from (`AdapterKind.configure`): no defaults of their own."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    threshold: str
    bandwidth: float
    tau_reduction: str
    jump_start: float
    jump_final: float
    jump_dropout: float
    authors_compat: bool  # the authors' code: γ lags one step, mask from S_start + 2, global τ keeps n − 1

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise JumpLoRAError(f"--rank must be ≥ 1, got {self.rank}")
        if self.alpha <= 0:
            raise JumpLoRAError(f"--alpha must be positive, got {self.alpha}")
        if not self.target_modules:
            raise JumpLoRAError("target_modules is empty: name the linear layers to adapt, e.g. q v")
        if self.threshold not in THRESHOLD_GROUPINGS:
            raise JumpLoRAError(f"threshold must be one of {', '.join(THRESHOLD_GROUPINGS)}, got {self.threshold!r}")
        if self.bandwidth <= 0:
            raise JumpLoRAError(f"bandwidth must be positive, got {self.bandwidth}: pass e.g. --bandwidth 0.001")
        if self.tau_reduction not in TAU_REDUCTIONS:
            raise JumpLoRAError(f"reduction must be 'mean' or 'sum', got {self.tau_reduction!r}")
        if not 0.0 <= self.jump_start < self.jump_final <= 1.0:
            raise JumpLoRAError(
                f"need 0 ≤ f_start < f_final ≤ 1, got f_start={self.jump_start}, f_final={self.jump_final}: "
                "pass e.g. --jump-start 0.2 --jump-final 0.8"
            )
        if not 0.0 <= self.jump_dropout < 1.0:
            raise JumpLoRAError(f"dropout must be in [0, 1), got {self.jump_dropout}")

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank
