"""The loop of an order: for each task, train a fresh adapter on top of the merged model, merge, let the method
remember the task, evaluate the seen tasks. `run_task_group` trains one task once per λ of a grid stage.

Within the package `evaluation.evaluate` is reached through its module, so that a wrapper set there (the Ray tests'
call log) sees every evaluation."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch

from jumplora.adapter_kinds import targets
from jumplora.adapters.base import find_targets
from jumplora.continual import evaluation
from jumplora.continual.divergence import check_diverged
from jumplora.continual.workspace import (
    ContinualState,
    Workspace,
    n_trainings,
    seen_tasks,
    task_seed,
    training_examples,
)
from jumplora.data.encode import Encoded, collate
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import DivergedError
from jumplora.families import is_causal
from jumplora.losses import summed_label_ce
from jumplora.methods import Regulariser, TaskContext, get_method, make_regulariser, stacks
from jumplora.record import TaskRecord
from jumplora.runtime import describe_runtime
from jumplora.steps import Watch
from jumplora.training import Trained, train_task


def train_copies(ws: Workspace, t: int, lams: Sequence[float], regularisers: Sequence[Regulariser | None],
                 shard: Shard, progress: bool, watch: Watch | None = None) -> Trained:
    """Training t on top of the current weights, once per λ of `lams` (`regularisers[k]` λ k's), not merged: task t
    of the order with a fresh adapter for one epoch; for a joint method (MTL) one adapter for one epoch over the union
    of the order's tasks, shuffled."""
    name, examples = training_examples(ws, t)
    mine = watch if watch is not None and watch.task == t else None
    return train_task(ws.model, examples, task_name=name, task_seed=task_seed(ws.config.seed, t), lams=lams,
                      regularisers=regularisers, config=ws.config, pad_id=ws.tokenizer.pad_token_id, device=ws.device,
                      shard=shard, progress=progress, watch=mine)


def checked(ws: Workspace, t: int, trained: Trained, k: int) -> TaskRecord:
    """λ k's record of training t; raises the DivergedError it stopped with, or `check_diverged`'s."""
    record = trained.record(k)
    check_diverged(record, ws.config, t)
    return record


def train(ws: Workspace, t: int, lam: float, regulariser: Regulariser | None, shard: Shard, progress: bool,
          watch: Watch | None = None) -> TaskRecord:
    """Training t of one λ (`train_copies`), merged: its record."""
    trained = train_copies(ws, t, [lam], [regulariser], shard, progress, watch)
    record = checked(ws, t, trained, 0)
    trained.adapter.merge(0)
    return record


def remember_and_evaluate(ws: Workspace, t: int, record: TaskRecord, regulariser: Regulariser | None, shard: Shard,
                          progress: bool) -> None:
    """After task t's update is merged: the method remembers the task (e.g. W_past += β ΔW_final, EWC's Fisher of
    task t), and the seen tasks' dev sets fill the record's dev row and flags."""
    if regulariser is not None:
        regulariser.after_task(task_context(ws, t, record, shard))
    found = evaluation.evaluate(ws, seen_tasks(ws, t), "dev", shard, progress)
    record.dev, record.dev_flags = found.accuracies, found.flags


def run_task(ws: Workspace, state: ContinualState, t: int, shard: Shard = SINGLE, progress: bool = True,
             test: bool = True, watch: Watch | None = None) -> None:
    """Train task t on top of the merged model, merge, let the method remember it, evaluate the seen tasks and append
    the task's record. With `test` False only the dev sets are evaluated (a λ-grid trial: selection reads dev; the
    chosen trial's test row is filled in afterwards by `evaluate_test_row`). `watch`: see `training.Watch`. The record
    keeps the task's wall seconds, timed around the whole (the evaluation reads its counts back to the host, so device
    work is included)."""
    started = time.monotonic()
    regulariser = make_regulariser(ws.config, state.memory)
    record = train(ws, t, ws.lambdas[t], regulariser, shard, progress, watch)
    remember_and_evaluate(ws, t, record, regulariser, shard, progress)
    record.seconds += time.monotonic() - started
    state.records.append(record)
    if test:
        evaluation.evaluate_test_row(ws, state, shard, progress)


def run_task_group(ws: Workspace, state: ContinualState, t: int, lams: Sequence[float], shard: Shard = SINGLE,
                   progress: bool = True, test: bool = False, watch: Watch | None = None,
                   keep: Callable[[int, ContinualState], None] | None = None) -> list[ContinualState | DivergedError]:
    """Train task t once per λ in `lams` (K ≥ 1), each from the same start (`ws.model` as it is, and `state`), as it
    would train alone in `run_task(ws, state, t, test=test)` with `ws.lambdas[t] = λ`. Per λ, in order: a new
    ContinualState (`state`'s records list copied and its memory cloned, with that λ's TaskRecord appended and its
    memory after the method's after_task; the record's seconds: its share of the training plus its own evaluation), or
    the DivergedError that λ alone raises (the others go on). `keep(k, state)` is called while `ws.model` holds λ k's
    weights (its checkpoint). On return `ws.model` holds the start weights again (bitwise) and `ws.lambdas` is as it
    was. A method that `stacks` trains the λ in one training of K copies (`training.train_task`); one that does not
    (EWC: every weight trains) one after another. `watch`: a λ search's rungs (K = 1, `training.Watch`)."""
    whole_model = get_method(ws.config.method).adapter.whole_model
    start = start_weights(ws, whole_model)
    together = len(lams) if stacks(ws.config.method) else 1
    outcomes: list[ContinualState | DivergedError] = []
    for first in range(0, len(lams), together):
        part = lams[first: first + together]
        started = time.monotonic()
        memories = [{name: value.clone() for name, value in state.memory.items()} for _ in part]
        regularisers = [make_regulariser(ws.config, memory) for memory in memories]
        trained = train_copies(ws, t, part, regularisers, shard, progress, watch)
        share = (time.monotonic() - started) / len(part)  # each λ's part of the one training
        for k, regulariser in enumerate(regularisers):
            started = time.monotonic()
            merging = False
            try:
                record = checked(ws, t, trained, k)
                merging = True
                trained.adapter.merge(k)
                mine = ContinualState(records=[*state.records, record], memory=memories[k],
                                      runtime=copy.deepcopy(state.runtime))
                remember_and_evaluate(ws, t, record, regulariser, shard, progress)
                if test:
                    evaluation.evaluate_test_row(ws, mine, shard, progress)
                record.seconds = share + time.monotonic() - started
                if keep is not None:
                    keep(first + k, mine)
                outcomes.append(mine)
            except DivergedError as error:
                outcomes.append(error)
            finally:  # λ k's update (or a whole-model training) taken out again, bitwise; an adapter's λ stopped
                if merging or whole_model:  # before its merge changed no weight (`AdapterCopies.finish`)
                    with torch.no_grad():
                        for weight, kept in start:
                            weight.copy_(kept)
    return outcomes


def start_weights(ws: Workspace, whole_model: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The weights a training and its merge change, each once with a clone to put it back from: every one where every
    weight trains (`whole_model`; a tied weight, which the state dict names twice, once), else the adapted linears'."""
    if whole_model:
        weights = [weight.detach() for weight in dict.fromkeys(ws.model.state_dict(keep_vars=True).values())]
    else:
        weights = [module.weight.detach() for module in find_targets(ws.model, targets(ws.config, ws.model)).values()]
    return [(weight, weight.clone()) for weight in weights]


def task_context(ws: Workspace, t: int, record: TaskRecord, shard: Shard) -> TaskContext:
    """What the method's regulariser reads after training t (`methods.TaskContext`): the methods see examples only
    through `nll`, never the data package."""
    causal, pad_id = is_causal(ws.model), ws.tokenizer.pad_token_id
    name, examples = training_examples(ws, t)

    def nll(example: Encoded) -> torch.Tensor:  # −log p(label | source): the summed label CE of the one example
        return summed_label_ce(ws.model, collate([example], pad_id, ws.device, causal))

    return TaskContext(model=ws.model, task=name, examples=examples, nll=nll, update=record.update, device=ws.device,
                       shard=shard)


def run_continual(ws: Workspace, state: ContinualState | None = None, shard: Shard = SINGLE, progress: bool = True,
                  stop: int | None = None, test: bool = True,
                  on_task: Callable[[Workspace, ContinualState, int], None] | None = None,
                  watch: Watch | None = None) -> ContinualState:
    """For each task in order, from the first one not in `state` (a resumed run) up to `stop` (default: all):
    train, merge, evaluate (the test sets too unless `test` is False); then `on_task(ws, state, t)` (tracking,
    a checkpoint). `watch`: callbacks in the middle of one task's training (`training.Watch`)."""
    state = state or ContinualState()
    todo = range(len(state.records), n_trainings(ws) if stop is None else min(stop, n_trainings(ws)))
    if todo:  # a resumed run that trains nothing keeps the runtime its checkpoint recorded
        state.runtime = describe_runtime(ws.config, shard.world, ws.device)
    for t in todo:
        run_task(ws, state, t, shard, progress, test, watch)
        if on_task is not None:
            on_task(ws, state, t)
    return state
