"""L1: a fresh LoRA per task, merged after it, and a smoothed L1 penalty on the change the task's merge makes:

    L = CE + λ_t · Σ_m Σ_ij (√((β B_m A_m)_ij² + ε²) − ε)

over the adapted modules m (β = alpha / r). Each term is |x| smoothed by ε: within ε·(entries) of λ‖β ΔW‖₁, with a
gradient (β ΔW / √((β ΔW)² + ε²), elementwise) that stays finite where an entry of ΔW is 0, as at each task's first
step (B = 0). ε is the method's own setting, `L1Settings.l1_eps`: the option `--l1-eps` of every command that trains,
recorded in results.json and MLflow under `l1`. λ_t comes per task from `--lambdas` or the λ grid, and
`--lambdas paper` (the default) gives `DEFAULT_LAMBDA` to every task after the first. The penalty sums |entries| of
every adapted matrix, far larger than ELLA's, so λ is far smaller: the grid's stages try `LAMBDA_GRID` unless `--grid`
says otherwise."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jumplora.adapters import LORA, TaskAdapter
from jumplora.config import RunConfig, check_options, option
from jumplora.errors import JumpLoRAError
from jumplora.kinds import POSITIVE
from jumplora.methods import MethodSpec, TaskContext

DEFAULT_LAMBDA = 1e-3  # λ of each task after the first under `--lambdas paper`; no paper has a table for l1
LAMBDA_GRID = (1e-4, 1e-3, 1e-2)  # what each stage of grid_lambda.py tries (SPEC §5's 1..1e5 is ELLA's scale)


@dataclass(frozen=True)
class L1Settings:
    """The method's own settings: each an option of every command that trains (`--l1-eps`), checked here."""

    l1_eps: float = option(1e-4, "L1: the ε of |x| ≈ √(x² + ε²) − ε in λ·Σ|β B A| (a finite gradient at 0)",
                           kind=POSITIVE)

    def __post_init__(self) -> None:
        check_options(self)


class L1:
    """The regulariser of `l1` (jumplora.methods.Regulariser): reads the adapter's factors, remembers nothing."""

    def __init__(self, eps: float) -> None:
        self.eps = eps

    @classmethod
    def from_config(cls, config: RunConfig, memory: dict[str, torch.Tensor]) -> L1:
        return cls(config.settings.l1_eps)  # its own settings: an L1Settings

    def start_task(self, adapter: TaskAdapter) -> None:
        if not adapter.factors():
            raise JumpLoRAError("l1 penalises a LoRA update: its adapter must be a LoRA")

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        if lam == 0:  # no penalty graph at all
            return None
        total = None
        for factor in adapter.factors().values():
            change = factor.delta() * factor.scaling  # β ΔW = β B A, (d_out, d_in), with gradient
            term = (change.square() + self.eps**2).sqrt().sum() - self.eps * change.numel()
            total = term if total is None else total + term
        return lam * total

    def after_task(self, context: TaskContext) -> None:
        """Nothing to remember: the next task's change is measured from the model this task was merged into."""


METHOD = MethodSpec("l1", adapter=LORA, regulariser=L1.from_config, per_task_lambda=True, settings=L1Settings,
                    default_lambda=DEFAULT_LAMBDA, lambda_grid=LAMBDA_GRID)
