"""L2: a fresh LoRA per task, merged after it, and a quadratic pull of the task's change back to the weights the
task started from (the L2 baseline of continual-learning papers):

    L = CE + λ_t · Σ_m ‖θ_m − θ_prev,m‖²_F = CE + λ_t · Σ_m ‖β B_m A_m‖²_F

over the adapted modules m, θ_prev = the merged weights after the previous task: merging the task's LoRA moves
W_m by exactly β B_m A_m (β = alpha / r), so the penalty needs no memory of past tasks. λ_t comes per task from
`--lambdas` or the λ grid (`per_task_lambda`)."""

from __future__ import annotations

import torch

from jumplora.adapters import LORA, TaskAdapter
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.methods import MethodSpec, TaskContext


class L2:
    """The regulariser of `l2` (jumplora.methods.Regulariser): reads the adapter's factors, remembers nothing."""

    @classmethod
    def from_config(cls, config: RunConfig, memory: dict[str, torch.Tensor]) -> L2:
        return cls()  # no setting of its own, and no memory: θ_prev is the merged model itself

    def start_task(self, adapter: TaskAdapter) -> None:
        if not adapter.factors():
            raise JumpLoRAError("l2 penalises a LoRA update: its adapter must be a LoRA")

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        if lam == 0:  # no penalty graph at all
            return None
        total = None
        for factor in adapter.factors().values():
            change = factor.delta().reshape(-1)  # ΔW = B A, (d_out · d_in), with gradient
            term = torch.dot(change, change) * factor.scaling**2  # ‖β ΔW‖², one dot product
            total = term if total is None else total + term
        return lam * total

    def after_task(self, context: TaskContext) -> None:
        """Nothing to remember: the next task's θ_prev is the model this task was merged into."""


METHOD = MethodSpec("l2", adapter=LORA, regulariser=L2.from_config, per_task_lambda=True)
