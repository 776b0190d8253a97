"""Benchmarks: a CL_Benchmark folder (`load_cl_benchmark`) or the synthetic stand-in, behind `load_benchmark`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from jumplora.data.builder import build_cl_benchmark
from jumplora.data.cl_benchmark import load_cl_benchmark, prepare_benchmark, select_tasks, validate_cl_benchmark
from jumplora.data.orders import load_orders, order_tasks
from jumplora.data.synthetic import synthetic_benchmark
from jumplora.data.tasks import BENCHMARK_ORDERS, DEFAULT_TASK_SPECS, PAPER_ORDERS, read_tasks_json
from jumplora.data.types import Benchmark, Example, RowCounts, TaskData, TaskSpec
from jumplora.data.validate import SplitReport, format_report, validate_task

__all__ = ["BENCHMARK_ORDERS", "DEFAULT_TASK_SPECS", "PAPER_ORDERS", "SYNTHETIC_DATA_SEED", "Benchmark", "Example",
           "RowCounts", "SplitReport", "TaskData", "TaskSpec", "build_cl_benchmark", "format_report", "load_benchmark",
           "load_cl_benchmark", "load_orders", "order_tasks", "read_tasks_json", "synthetic_benchmark",
           "validate_cl_benchmark", "validate_task"]

SYNTHETIC_DATA_SEED = 0


def load_benchmark(data_dir: str | Path | None, *, seed: int = 42, max_train_per_task: int | None = None,
                   max_eval_per_task: int | None = None, strict: bool = False,
                   tasks: Iterable[str] | None = None) -> Benchmark:
    """The CL_Benchmark folder `data_dir`, or the synthetic benchmark when it is None.

    The synthetic data is always generated with `SYNTHETIC_DATA_SEED` (fixed data, like a folder on disk); `seed`
    only chooses the examples kept by the caps, in both cases. `tasks` limits loading to those tasks."""
    options = {"seed": seed, "max_train_per_task": max_train_per_task, "max_eval_per_task": max_eval_per_task,
               "strict": strict}
    if data_dir is not None:
        return load_cl_benchmark(data_dir, tasks=tasks, **options)
    synthetic = _generated_synthetic()
    names = select_tasks(DEFAULT_TASK_SPECS, tasks, "the synthetic benchmark")
    written = {name: synthetic.tasks[name] for name in names}
    return prepare_benchmark("synthetic", written, synthetic.orders, source="the synthetic benchmark", **options)


@functools.cache
def _generated_synthetic() -> Benchmark:
    """The synthetic benchmark as generated, once per process: it is fixed data, like a folder on disk, and a tiny
    preset run loads it twice (its capped tasks, and the whole source the base is built from). Only read here:
    `prepare_benchmark` builds new splits from it."""
    return synthetic_benchmark(SYNTHETIC_DATA_SEED)
