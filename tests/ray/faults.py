"""Fault injection for the Ray tests, from outside the product: a `worker_process_setup_hook` that every Ray worker
process of a test's cluster runs at start-up, wrapping `Shard.sum_gradients` (the all-reduce of every training step)
so that a worker pauses in the middle of a task, long enough for the test to kill it."""

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
