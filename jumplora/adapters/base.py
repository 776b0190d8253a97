"""What the training loop and the methods need from an adapter: `AdapterCopies`, K ≥ 1 copies of one task's fresh
adapter on a model (one per λ trained together, `training.train_task`); `CopyView` (`TaskAdapter`), one copy as its
λ's regulariser reads it; the update's `Factors`. How a kind is built: `jumplora.adapter_kinds`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
from torch import nn

from jumplora.errors import DivergedError, JumpLoRAError


@dataclass(frozen=True)
class Factors:
    """One adapted module's low-rank update in the current step (SPEC §1): ΔW = B A, applied as β · ΔW_eff with
    ΔW_eff = ΔW until the jump is in effect, then γ · (ΔW ⊙ mask) + (1 − γ) · ΔW (plain LoRA: never; `mask` gives
    None). A method builds its own terms from these (ELLA's P, O-LoRA's orthogonality)."""

    a: torch.Tensor  # lora_A (r, d_in): the trained parameter itself
    b: torch.Tensor  # lora_B (d_out, r)
    scaling: float  # β = alpha / r
    delta: Callable[[], torch.Tensor]  # ΔW = B A (d_out, d_in), with gradient (JumpLoRA: this step's forward's)
    mask: Callable[[], torch.Tensor | None]  # 1[|ΔW| > τ] (bool, no gradient) once the jump is in effect, else None
    gamma: float = 0.0  # γ of this step: the masked share of ΔW_eff


class AdapterCopies(Protocol):
    """K ≥ 1 copies of one task's fresh adapter on `model`, one per λ, trained in one loop (`training.train_task`).
    Each copy starts from what one adapter alone starts from (one adapter's RNG draws, copied K times) and has its own
    parameters (so AdamW and clipping act on each as on one adapter alone) and threshold; every adapted layer holds
    the K copies and routes its input (`route`). A kind that cannot hold copies (every weight trains) has `stacks`
    False and is built with K = 1: the loop trains its λ one by one."""

    stacks: ClassVar[bool]
    model: nn.Module
    copies: int
    errors: dict[int, DivergedError]  # copy k → the error it stopped with (τ by count on a ΔW not finite)

    def trainable_parameters(self, k: int) -> list[nn.Parameter]:
        """Copy k's parameters, in the order of one adapter alone (its optimizer's and clipping norm's order)."""
        ...

    def route(self, k: int | None) -> AbstractContextManager[None]:
        """Inside, a forward of the model takes copy k's rows alone, through copy k, op for op as one adapter alone
        computes them; with None a batch of the K copies in blocks (copy k: rows k·B … (k+1)·B − 1), block k through
        copy k. Outside, a forward goes through copy 0."""
        ...

    def before_step(self, step: int) -> None:
        """Before optimizer step `step` (1-based): e.g. γ of the schedule."""

    def after_step(self, step: int) -> None:
        """After optimizer step `step`: e.g. τ by count after S_start, per copy (a copy that fails is in `errors`)."""

    def factors(self, k: int) -> dict[str, Factors]:
        """Copy k's low-rank update of every adapted module, by module path ({} when every weight trains)."""
        ...

    def thresholds(self) -> list[dict[str, float]]:
        """τ per threshold group of each copy ({} without thresholds)."""
        ...

    def finish(self) -> list[dict[str, torch.Tensor]]:
        """After the last step: each copy's update per target module (on its device). The adapter comes off: the model
        is plain again, with its start weights (a whole-model kind: with its trained ones, the update merged)."""
        ...

    def merge(self, k: int) -> None:
        """After `finish`: W ← W + copy k's update (the loop puts the start weights back: `run_task_group`)."""


@dataclass(frozen=True)
class CopyView:
    """Copy k of `adapter`: one task's adapter as its λ's regulariser reads it (`TaskAdapter`;
    `Regulariser.start_task`, `.loss`), so a method runs unchanged whatever K."""

    adapter: AdapterCopies
    k: int

    @property
    def model(self) -> nn.Module:
        return self.adapter.model

    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.adapter.trainable_parameters(self.k)

    def factors(self) -> dict[str, Factors]:
        """The low-rank update of every adapted module, by module path ({} when every weight trains)."""
        return self.adapter.factors(self.k)


TaskAdapter = CopyView  # what a method's regulariser is handed: the only kind of one, so no protocol of its own


def find_targets(model: nn.Module, target_modules: tuple[str, ...]) -> dict[str, nn.Linear]:
    """Every `nn.Linear` whose last name component is in `target_modules`, by full module path. Each name must be
    some linear's (`prepare` asks before training): a name that matches none would be recorded as adapted while
    nothing is."""
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    names = sorted({name.rsplit(".", 1)[-1] for name in linears})
    unknown = [name for name in target_modules if name not in names]
    if unknown:
        raise JumpLoRAError(f"--target-modules: the model has no linear layer named {', '.join(unknown)}; its linear "
                            f"layers are named {', '.join(names)}")
    return {name: module for name, module in linears.items() if name.rsplit(".", 1)[-1] in target_modules}
