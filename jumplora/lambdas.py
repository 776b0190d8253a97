"""λ per task (SPEC §5), resolved here for `jumplora run`, train_sequence.py, reproduce.py and the grid alike, from
what the user asked for (`RunConfig.lambdas`: a table's name of `LAMBDA_TABLES`, in search_spaces/lambdas.yaml, or
one number per task, as `config.LAMBDA_VALUES` reads it)."""

from __future__ import annotations

from jumplora import spaces
from jumplora.config import LAMBDA_TABLES, RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.methods import get_method


def resolve_lambdas(config: RunConfig, n_tasks: int) -> list[float]:
    """λ of each of the order's `n_tasks` tasks: zeros for a method without a per-task λ; the named table's for the
    configuration (`spaces.paper_lambdas`); or the user's list. A count other than `n_tasks` is refused."""
    if not get_method(config.method).per_task_lambda:
        return [0.0] * n_tasks
    table = config.lambdas in LAMBDA_TABLES
    values = list(spaces.paper_lambdas(config.lambdas, config) if table else config.lambdas)
    if len(values) != n_tasks:
        raise JumpLoRAError(f"the {config.lambdas} λ table for order {config.order} has {len(values)} values but the "
                            f"order has {n_tasks} tasks: pass --lambdas with {n_tasks} values" if table else
                            f"--lambdas has {len(values)} values but order {config.order} has {n_tasks} tasks")
    return values
