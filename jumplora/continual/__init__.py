"""The continual loop: task order → datasets → model + adapter → train one task → merge → evaluate seen tasks.

One loop for every entry point: `jumplora run` calls it in one process, a Ray Train worker with its `Shard`
(`jumplora.distributed`). Its modules, by concern: `MODULES` (docs/ARCHITECTURE.md).

Callers outside the package use the names below, each imported from its module on first use (`__getattr__`), so the
data side (the Ray driver: `run_benchmark`, `seen_tasks`) loads no model code. A test that replaces a function
replaces it where it is looked up: `jumplora.continual.<name>` from outside, its module inside the package."""

import importlib

MODULES = {  # each module of the package and the names it gives its callers
    "divergence": ("check_diverged",),
    "evaluation": ("evaluate", "evaluate_mid_task", "evaluate_test_row", "evaluated_examples"),
    "loop": ("run_continual", "run_task", "run_task_group", "train"),
    "single_task": ("SHARED_ADAPTER", "SingleTaskBaselines", "single_task_accuracies", "single_task_accuracy",
                    "single_task_baselines", "single_task_config", "single_task_key"),
    "summary": ("summarise",),
    "workspace": ("ContinualState", "Workspace", "n_trainings", "prepare", "resolve_device", "run_benchmark",
                  "seen_tasks", "subset_indices"),
}
HOME = {name: module for module, names in MODULES.items() for name in names}
__all__ = sorted(HOME)


def __getattr__(name: str):
    """A name of `__all__`, or a module of the package, imported on first use (PEP 562)."""
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{HOME[name]}"), name)
    globals()[name] = value
    return value
