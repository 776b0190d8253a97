"""What one task's training is counted in, without torch (the Ray driver plans with it and loads no model code):
optimizer steps per epoch, the least a task may train (SPEC §1), and a watch at given steps (a λ search's rungs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jumplora.config import MIN_STEPS, STEPS_RULE
from jumplora.errors import JumpLoRAError


@dataclass(frozen=True)
class Watch:
    """`callback(step)` right after optimizer step s ∈ `steps` of task `task` (0-based), adapter attached and not
    merged: a λ search's rungs read the model there. The callback must change nothing that training reads (see
    `continual.evaluate_mid_task`), so a watched task trains exactly as an unwatched one."""

    task: int
    steps: frozenset[int]
    callback: Callable[[int], None]


def steps_per_epoch(n_examples: int, batch_size: int) -> int:
    return -(-n_examples // batch_size)


def check_enough_steps(task: str, n_examples: int, batch_size: int) -> None:
    """SPEC §1: a task trains at least `MIN_STEPS` optimizer steps; say how many examples that takes."""
    if steps_per_epoch(n_examples, batch_size) < MIN_STEPS:
        raise JumpLoRAError(
            f"task {task!r} has {n_examples} training examples: {steps_per_epoch(n_examples, batch_size)} step(s) "
            f"at batch {batch_size}; {STEPS_RULE}: at least {(MIN_STEPS - 1) * batch_size + 1} examples are needed "
            f"for {MIN_STEPS} steps (raise --max-train-per-task or lower --batch-size)"
        )
