"""The continual loop: task order → datasets → model + adapter → train one task → merge → evaluate seen tasks.

One loop for every entry point: `jumplora run` calls it in one process; a Ray Train worker calls the same functions
with its `Shard` (data-parallel training and sharded evaluation, see `jumplora.distributed`). By concern:

- `workspace`: set-up (`prepare` → `Workspace`), the loop's state, which tasks and examples a step reads;
- `loop`: the loop of an order (`run_continual`, `run_task`) and a grid stage's λ group (`run_task_group`);
- `evaluation`: accuracy on the seen tasks, after a training or in its middle;
- `divergence`: a diverged training stopped in one line;
- `single_task`: the a0 baselines;
- `summary`: the results of a finished run.

Callers outside the package use the names below. A test that replaces a function replaces it where it is looked
up: `jumplora.continual.<name>` for a call from outside, its module for a call inside the package."""

from jumplora.continual.divergence import check_diverged
from jumplora.continual.evaluation import evaluate, evaluate_mid_task, evaluate_test_row, evaluated_examples
from jumplora.continual.loop import run_alone, run_continual, run_task, run_task_group, stacks, train
from jumplora.continual.single_task import (
    SHARED_ADAPTER,
    SingleTaskBaselines,
    single_task_accuracies,
    single_task_accuracy,
    single_task_baselines,
    single_task_config,
    single_task_key,
)
from jumplora.continual.summary import summarise
from jumplora.continual.workspace import (
    ContinualState,
    Workspace,
    n_trainings,
    prepare,
    resolve_device,
    run_benchmark,
    seen_tasks,
    subset_indices,
)

__all__ = [
    "SHARED_ADAPTER",
    "ContinualState",
    "SingleTaskBaselines",
    "Workspace",
    "check_diverged",
    "evaluate",
    "evaluate_mid_task",
    "evaluate_test_row",
    "evaluated_examples",
    "n_trainings",
    "prepare",
    "resolve_device",
    "run_alone",
    "run_benchmark",
    "run_continual",
    "run_task",
    "run_task_group",
    "seen_tasks",
    "single_task_accuracies",
    "single_task_accuracy",
    "single_task_baselines",
    "single_task_config",
    "single_task_key",
    "stacks",
    "subset_indices",
    "summarise",
    "train",
]
