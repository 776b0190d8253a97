"""Configuration of the JumpLoRA adapter, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from jumplora.errors import JumpLoRAError

THRESHOLD_GROUPINGS = ("global", "per_block")


@dataclass(frozen=True)
class JumpLoraConfig:
    """r, alpha and targets as PEFT's LoraConfig; the rest is JumpLoRA's threshold and schedule (SPEC §1)."""

    r: int = 8
    alpha: float = 32.0
    target_modules: tuple[str, ...] = ("q", "v")
    threshold: str = "global"
    bandwidth: float = 1e-3
    reduction: str = "mean"
    start_frac: float = 0.2
    final_frac: float = 0.8
    dropout: float = 0.0
    authors_compat: bool = False  # the authors' code: γ lags one step, mask from S_start + 2, global τ keeps n − 1

    def __post_init__(self) -> None:
        if self.r < 1:
            raise JumpLoRAError(f"rank r must be ≥ 1, got {self.r}")
        if self.alpha <= 0:
            raise JumpLoRAError(f"alpha must be positive, got {self.alpha}")
        if not self.target_modules:
            raise JumpLoRAError("target_modules is empty: name the linear layers to adapt, e.g. q v")
        if self.threshold not in THRESHOLD_GROUPINGS:
            raise JumpLoRAError(f"threshold must be one of {', '.join(THRESHOLD_GROUPINGS)}, got {self.threshold!r}")
        if self.bandwidth <= 0:
            raise JumpLoRAError(f"bandwidth must be positive, got {self.bandwidth}: pass e.g. --bandwidth 0.001")
        if self.reduction not in ("mean", "sum"):
            raise JumpLoRAError(f"reduction must be 'mean' or 'sum', got {self.reduction!r}")
        if not 0.0 <= self.start_frac < self.final_frac <= 1.0:
            raise JumpLoRAError(
                f"need 0 ≤ f_start < f_final ≤ 1, got f_start={self.start_frac}, f_final={self.final_frac}: "
                "pass e.g. --jump-start 0.2 --jump-final 0.8"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise JumpLoRAError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def scaling(self) -> float:
        return self.alpha / self.r
