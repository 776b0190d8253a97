"""Evaluation inside a continual run: accuracy of the current model on seen tasks (sharded over the workers), in the
middle of a training (a search's rung) or after one (a test row)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from jumplora import metrics
from jumplora.continual.workspace import ContinualState, Workspace, n_trainings, seen_tasks, subset
from jumplora.data.types import RowCounts
from jumplora.distributed import SINGLE, Shard
from jumplora.evaluation import exact_match_flags
from jumplora.flags import pack

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` finds: each task's accuracy and its examples' flags (`jumplora.flags.pack`, in the order of
    the task's examples, the rows scored as wrong under `--authors-compat` last); an a0 row too (None: not kept,
    `single_task_accuracies`)."""

    accuracies: list[float]
    flags: list[str] | None


def evaluate(ws: Workspace, tasks: tuple[str, ...], split: str, shard: Shard = SINGLE,
             progress: bool = True, limit: int | None = None) -> Evaluation:
    """Accuracy of the current (merged) model on each of `tasks` (on at most `limit` examples of each: `subset`), and
    each example's flag: every worker decodes its slice of a task's examples, and the (correct, seen) counts and the
    flags (each worker's slice in a zero vector of the task's length) are summed in one all-reduce. With
    `--authors-compat` the test rows labelled outside the options (`benchmark.test_rows`) are scored as wrong, as the
    authors' script scores them (SPEC §4, `metrics.authors_accuracy`), and flagged so; otherwise they stay out."""
    counts = torch.zeros(len(tasks), 2, dtype=torch.float64)
    sizes = []  # how many examples of each task the workers decode together
    verdicts = []  # per task: this worker's flags in its slice, zeros elsewhere
    for i, task in enumerate(tasks):
        examples = subset(ws, task, split, limit)
        sizes.append(len(examples))
        start, end = shard.bounds(len(examples))
        mine = examples[start:end]
        flags = exact_match_flags(ws.model, ws.tokenizer, mine, batch_size=ws.config.eval_batch_size,
                                  device=ws.device, desc=f"{split} {task}", progress=progress,
                                  mode=ws.config.eval_mode, precision=ws.config.precision) if mine else []
        counts[i] = torch.tensor([sum(flags), len(flags)], dtype=torch.float64)
        verdict = torch.zeros(len(examples), dtype=torch.float64)
        verdict[start:end] = torch.tensor(flags, dtype=torch.float64)
        verdicts.append(verdict)
    summed = shard.sum_(torch.cat([counts.reshape(-1), *verdicts]).to(ws.device)).cpu()
    counts, verdicts = summed[: counts.numel()].reshape(counts.shape), summed[counts.numel():].split(sizes)
    accuracies, packed = [], []
    for task, size, (correct, seen), verdict in zip(tasks, sizes, counts.tolist(), verdicts, strict=True):
        assert seen == size, "every example is evaluated exactly once"
        rows = ws.benchmark.test_rows.get(task, RowCounts(int(seen)))
        wrong_rows = rows.unlabelled if split == "test" and ws.config.authors_compat else 0
        accuracies.append(metrics.authors_accuracy(correct, int(seen), rows.labelled, wrong_rows))
        wrong = metrics.authors_wrong_rows(int(seen), rows.labelled, wrong_rows)
        packed.append(pack([*(verdict.numpy() > 0.5), *[False] * wrong]))
    return Evaluation(accuracies, packed)


def evaluate_mid_task(ws: Workspace, t: int, limit: int | None, shard: Shard = SINGLE) -> Evaluation:
    """Dev accuracy of each seen task (at most `limit` examples of each) in the middle of training t, as the model is
    now: adapter attached, not merged (a λ search's rung, `training.Watch`). It changes nothing training reads: the
    model is put back in training mode (`exact_match_flags`), decoding is greedy, the subset has its own generator,
    and the global RNG state (dropout masks to come) is restored afterwards whatever the model's code draws."""
    devices = [ws.device] if ws.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return evaluate(ws, seen_tasks(ws, t), "dev", shard, progress=False, limit=limit)


def evaluated_examples(ws: Workspace, tasks: tuple[str, ...], split: str, limit: int | None = None) -> int:
    """How many examples `evaluate(ws, tasks, split, limit=limit)` decodes (`subset_indices`: all, or `limit`)."""
    sizes = (len(ws.encoded[task][split]) for task in tasks)
    return sum(size if limit is None else min(size, limit) for size in sizes)


def evaluate_test_row(ws: Workspace, state: ContinualState, shard: Shard = SINGLE, progress: bool = True) -> None:
    """The test accuracies a[t][j], j ≤ t, of the last finished task t, with the current (merged) model; the time it
    takes is added to the task's seconds."""
    record, done = state.records[-1], len(state.records)
    started = time.monotonic()
    found = evaluate(ws, seen_tasks(ws, done - 1), "test", shard, progress)
    record.test, record.test_flags = found.accuracies, found.flags
    record.seconds += time.monotonic() - started
    logger.info("training %d/%d %s: test accuracy on seen tasks %s", done, n_trainings(ws), record.task,
                ", ".join(f"{100 * a:.1f} %" for a in record.test))
