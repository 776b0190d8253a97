"""Fault injection and counting for the Ray tests, from outside the product: `worker_process_setup_hook`s that every
Ray worker process of a test's cluster runs at start-up. `pause_at_step` wraps `Shard.sum_gradients` (the all-reduce
of every training step) so that a worker pauses in the middle of a task, long enough for the test to kill it;
`log_calls` records every evaluation and every trial that starts."""

from __future__ import annotations

from collections.abc import Callable

PAUSE_SECONDS = 600
ARMED = "armed"  # the hook acts only while this file exists in its directory


def pause_at_step(directory: str, call: int) -> Callable[[], None]:
    """A setup hook: once `directory/armed` exists, each data-parallel worker process pauses right after its
    `call`-th gradient all-reduce, after writing its PID to `directory/rank<r>.pid`; a restarted worker finds that
    file and goes on. Pickled by value (a closure), so the workers need not import this module."""

    def install() -> None:
        import itertools
        import os
        import time
        from pathlib import Path

        from jumplora.distributed import Shard

        original = Shard.sum_gradients
        calls = itertools.count(1)

        def sum_then_pause(self, params) -> None:
            original(self, params)
            marker = Path(directory) / f"rank{self.rank}.pid"
            if self.world > 1 and (Path(directory) / ARMED).exists() and not marker.exists() and next(calls) == call:
                marker.write_text(str(os.getpid()))
                time.sleep(PAUSE_SECONDS)

        Shard.sum_gradients = sum_then_pause

    return install


def log_calls(path: str) -> Callable[[], None]:
    """A setup hook: every call of `evaluate` appends `{"split", "tasks", "limit", "node"}`, every λ a training
    trains (`train_copies`: a run's task, an a0, each λ of a group) `{"train", "lam", "method", "seed", "node"}`,
    every λ group (`run_task_group`) `{"group": [λ…], "task"}` and every optimizer step (the gradient
    all-reduce `Shard.sum_gradients`, once a step; a stack of λ takes one) `{"step", "node"}` to the JSON-lines file
    `path` (`node`: the Ray node id of the process; every entry also has the process id, `pid`). The library is
    patched, not `ray_jobs`: that package is shipped to the workers by value, so patching its module there changes
    nothing. Each function is replaced where it is looked up (`jumplora.continual`'s docstring): `evaluate` and
    `train_copies` in their modules (the loop calls them), `run_task_group` in the package (`ray_jobs` calls it)."""

    def install() -> None:
        import json
        import os

        import ray

        import jumplora.continual
        from jumplora.continual import evaluation, loop
        from jumplora.distributed import Shard

        evaluate, train_copies, sum_gradients = evaluation.evaluate, loop.train_copies, Shard.sum_gradients
        run_task_group = jumplora.continual.run_task_group

        def append(entry: dict) -> None:
            entry["node"], entry["pid"] = ray.get_runtime_context().get_node_id(), os.getpid()
            with open(path, "a") as log:
                log.write(json.dumps(entry) + "\n")

        def logged_evaluate(ws, tasks, split, *args, **kwargs):
            append({"split": split, "tasks": list(tasks), "limit": kwargs.get("limit")})
            return evaluate(ws, tasks, split, *args, **kwargs)

        def logged_train_copies(ws, t, lams, *args, **kwargs):
            for lam in lams:
                append({"train": ws.tasks[t], "lam": lam, "method": ws.config.method, "seed": ws.config.seed})
            return train_copies(ws, t, lams, *args, **kwargs)

        def logged_group(ws, state, t, lams, *args, **kwargs):
            append({"group": list(lams), "task": ws.tasks[t]})
            return run_task_group(ws, state, t, lams, *args, **kwargs)

        def logged_step(self, params) -> None:
            append({"step": 1})
            sum_gradients(self, params)

        evaluation.evaluate = logged_evaluate
        loop.train_copies = logged_train_copies
        jumplora.continual.run_task_group = logged_group
        Shard.sum_gradients = logged_step

    return install
