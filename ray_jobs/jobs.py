"""What the drivers hand to the workers, as typed values: a `Job` (the resolved run configuration, λ always an explicit
list, checked on the driver before anything is scheduled) and a unit of work (`Sequence`: an order's tasks;
`LambdaGroup`: one task once per λ of a grid stage, K ≥ 1; `SingleTask`: a baseline a0), bundled as a `Trial`; and
what a trial reports back to them (`task_metrics`, at a rung `rung_watch`, `a0_metrics`, a λ group's `GROUP`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora import continual, cost
from jumplora.config import RunConfig
from jumplora.data import order_tasks
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import JumpLoRAError
from jumplora.lambdas import resolve_lambdas
from jumplora.steps import Watch, check_enough_steps
from jumplora.storage import JOB_FILE, Storage

if TYPE_CHECKING:  # the workers' side (`continual`'s model code) loads where they run: the driver loads no torch
    from jumplora.continual import ContinualState, Workspace
    from jumplora.record import TaskRecord

RUNG = "rung"  # a rung's report (`Rungs`): the rung's number, 1-based; RUNG_DEV: the dev means so far, this one last
RUNG_DEV = "rung_dev"
# a trial's report of the seen tasks' dev flags: their packed cells (`jumplora.flags`) joined by spaces, one string
# (Tune's loggers take numbers, strings and number lists: a list of strings would be warned about)
DEV_FLAGS = "dev_flags"


@dataclass(frozen=True)
class Job:
    """A continual run's configuration and where each node caches the tiny preset."""

    run: RunConfig
    cache_dir: str

    def with_lambda(self, t: int, lam: float) -> Job:
        """The same job with λ of task t (0-based) set to `lam` (a grid trial)."""
        return self.with_lambdas([*self.run.lambdas[:t], lam, *self.run.lambdas[t + 1:]])

    def with_lambdas(self, lambdas: list[float]) -> Job:
        return dataclasses.replace(self, run=dataclasses.replace(self.run, lambdas=list(lambdas)))

    def workspace(self, device: str, shard: Shard = SINGLE) -> Workspace:
        """The library's `prepare` (data, the base model from the node's cache, encoded splits) on `device`."""
        return continual.prepare(dataclasses.replace(self.run, device=device), Path(self.cache_dir), progress=False,
                                 shard=shard)

    def identity(self) -> dict:
        """What must match for a job to resume another one's files (not where the cache is, nor the device)."""
        return {"run": {key: value for key, value in self.run.to_dict().items() if key != "device"}}


@dataclass(frozen=True)
class Rungs:
    """A λ search's rungs in the training of a trial's last task: after each of optimizer steps `steps` the trial
    reports its mean dev accuracy over the seen tasks, on `examples` dev examples of each (a fixed seeded subset), and
    goes on only if the search lets it (`ray_jobs.halving`)."""

    steps: tuple[int, ...]
    examples: int


@dataclass(frozen=True)
class Sequence:
    """Train the order's tasks from the latest checkpoint (or the trial's start) up to task `stop` (1-based, included),
    reporting a checkpoint after each; then, if `publish` names a storage folder, write the run directory there (with
    the merged model if `merged_model`)."""

    stop: int
    publish: str | None = None
    merged_model: bool = False


@dataclass(frozen=True)
class LambdaGroup:
    """A grid stage's unit of work: train task `task` (0-based) once per λ of `lambdas` (K ≥ 1), all from the trial's
    start, in one process (`continual.run_task_group`: one stack where the method stacks, else one λ after another);
    dev sets only unless `test`; a search compares a group of one at `rungs`. Each λ's checkpoint goes to
    `folder/<its id in ids>`, and the trial reports every λ's metrics and checkpoint at once (`GROUP`), so that
    everything downstream reads one result per λ, however they were packed."""

    task: int
    lambdas: tuple[float, ...]
    ids: tuple[str, ...]  # the result id of each λ (`stages.Stage.lambda_id`)
    folder: str  # a storage URI
    test: bool = False
    rungs: Rungs | None = None


GROUP = "group"  # a `LambdaGroup` trial's report: {λ's id: {"metrics": …, "checkpoint": path}}


@dataclass(frozen=True)
class SingleTask:
    """Train task `task` (0-based) alone from the base model and report its test accuracy a0 (SPEC §4)."""

    task: int


@dataclass
class Work:
    """What trials ran, counted by the workers that ran them: optimizer steps and evaluated examples. A trial reports
    its own after every task and at every rung (`METRICS`); a grid stage records the sum of its trials' and its test
    row's (the stage record's `work`)."""

    steps: int = 0
    dev_examples: int = 0
    test_examples: int = 0

    METRICS = ("steps_run", "dev_examples", "test_examples")  # the keys of a trial's reported metrics

    def metrics(self, steps_now: int = 0) -> dict[str, int]:
        """As reported, with `steps_now` more steps run in the task being trained."""
        return dict(zip(self.METRICS, (self.steps + steps_now, self.dev_examples, self.test_examples), strict=True))

    def count(self, ws: Workspace, state: ContinualState) -> Work:
        """This, with what the last training of `state` ran added: its optimizer steps and evaluated examples."""
        record, seen = state.records[-1], continual.seen_tasks(ws, len(state.records) - 1)
        self.steps += record.steps
        self.dev_examples += continual.evaluated_examples(ws, seen, "dev")
        self.test_examples += continual.evaluated_examples(ws, seen, "test") if record.test else 0
        return self

    @classmethod
    def from_metrics(cls, metrics: dict) -> Work:
        return cls(*(int(metrics.get(key, 0)) for key in cls.METRICS))

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))


def dev_parts(accuracies: list[float], prefix: str = "dev") -> dict[str, float]:
    """A trial's report of the seen tasks' dev accuracies: the mean over them, over the past ones (none after task 1)
    and the current one's."""
    past = accuracies[:-1]
    return {f"{prefix}_mean": math.fsum(accuracies) / len(accuracies), f"{prefix}_current": accuracies[-1],
            **({f"{prefix}_past": math.fsum(past) / len(past)} if past else {})}


def task_metrics(record: TaskRecord, done: int, work: Work, rung_dev: Collection[float] = ()) -> dict:
    """A trial's report after its `done`-th training (`record`): λ, the dev mean and its parts (`dev_parts`), the
    seen tasks' dev flags (`DEV_FLAGS`: a grid's selection reads them), what the trial ran so far
    (`work`), the training's wall seconds (for its cost: a grid sums its trials'), the rungs' dev means (a λ search)
    and the seen tasks' test mean when tested (MTL: every task, after its one training)."""
    metrics = {"tasks_done": done, "lam": record.lam, **dev_parts(record.dev), DEV_FLAGS: " ".join(record.dev_flags),
               **work.metrics(), "seconds": record.seconds}
    if rung_dev:
        metrics[RUNG_DEV] = list(rung_dev)
    if record.test:
        metrics["test_mean"] = math.fsum(record.test) / len(record.test)
    return metrics


def dev_flags(metrics: dict) -> list[str] | None:
    """The dev cells of a trial's report (`DEV_FLAGS`); None when it has none (a rung's report, an older trial)."""
    return metrics.get(DEV_FLAGS, "").split() or None


def rung_watch(ws: Workspace, t: int, rungs: Rungs, shard: Shard, work: Work, rung_dev: list[float],
               report: Callable[[dict], None]) -> Watch:
    """At each rung of training t: the seen tasks' dev accuracy on the rung subset, counted in `work`, its mean
    appended to `rung_dev`, and handed to `report` (`RUNG`, its dev mean and its past-task and current-task parts).
    The worker's report returns when the search lets the trial go on; a trial the search cuts is stopped by Tune while
    it waits (`ray_jobs.halving`)."""

    def at_rung(step: int) -> None:
        accuracies = continual.evaluate_mid_task(ws, t, rungs.examples, shard).accuracies
        work.dev_examples += continual.evaluated_examples(ws, continual.seen_tasks(ws, t), "dev", rungs.examples)
        rung_dev.append(math.fsum(accuracies) / len(accuracies))
        report({RUNG: len(rung_dev), "rung_step": step, RUNG_DEV: list(rung_dev), **dev_parts(accuracies, "rung_dev"),
                **work.metrics(steps_now=step)})

    return Watch(t, frozenset(rungs.steps), at_rung)


# what a single-task trial reports (a0_flags: its test cell's flags, `jumplora.flags`)
A0_METRICS = ("a0", "a0_flags", "seconds", "steps", "device_hours", "device_unit")


def a0_metrics(task: int, record: TaskRecord, runtime: dict, test_examples: int) -> dict:
    """A single-task trial's report (`SingleTask`): the task (1-based), a0 (its test accuracy) and its flags, the
    training's wall seconds, optimizer steps and device-hours (`cost.devices` of how it ran, `runtime`), and its
    `Work`."""
    count, unit = cost.devices(runtime)
    return {"task": task + 1, "a0": record.test[0], "a0_flags": record.test_flags[0], "seconds": record.seconds,
            "steps": record.steps, "device_hours": count * record.seconds / 3600, "device_unit": unit,
            **Work(record.steps, 0, test_examples).metrics()}


@dataclass(frozen=True)
class Trial:
    """One Tune trial: a unit of work of a job; `id` names its folder."""

    id: str
    job: Job
    work: Sequence | SingleTask | LambdaGroup

    @property
    def results(self) -> tuple[str, ...]:
        """The ids of the results the trial leaves: one per λ of a group, else its own."""
        return self.work.ids if isinstance(self.work, LambdaGroup) else (self.id,)


def build_base(job: Job) -> None:
    """The tiny preset's base, built on the driver once, with its progress bars, before any trial starts (otherwise
    the first trial of each node builds it, silently). Hub models are downloaded by each node's workers."""
    from jumplora import tiny  # model code: loaded once the job is checked

    if job.run.model in tiny.PRESETS:
        tiny.named_model_dir(job.run.model, job.run.data_dir, Path(job.cache_dir))


def with_lambdas(config: RunConfig) -> RunConfig:
    """`config` with λ resolved (`jumplora.lambdas`): one number per task of the whole order."""
    n_tasks = len(order_tasks(config.data_dir, config.order))  # first: an unknown order is the clearest message
    return dataclasses.replace(config, lambdas=resolve_lambdas(config, n_tasks))


def check(config: RunConfig, workers: int) -> tuple[str, ...]:
    """The tasks the job trains; refuses what would fail later: unknown order, too few steps, too many workers."""
    tasks = order_tasks(config.data_dir, config.order)
    if config.max_tasks is not None and config.max_tasks > len(tasks):
        raise JumpLoRAError(f"--max-tasks {config.max_tasks}, but order {config.order} has {len(tasks)} tasks")
    tasks = tasks[: config.max_tasks or len(tasks)]
    if config.batch_size % workers:
        raise JumpLoRAError(f"the global batch of {config.batch_size} cannot be split evenly over {workers} workers")
    benchmark = continual.run_benchmark(config, tasks)
    for task in tasks:
        n_train = len(benchmark.tasks[task].train)
        check_enough_steps(task, n_train, config.batch_size)
        if 0 < n_train % config.batch_size < workers:
            raise JumpLoRAError(f"task {task!r}: the last global batch has {n_train % config.batch_size} example(s), "
                                f"fewer than the {workers} workers; change --max-train-per-task or the worker count")
    return tasks


def claim(folder: Storage, job: Job) -> None:
    """Record the job in its storage folder, or check that the folder holds this very job (then it resumes)."""
    if not folder.exists(JOB_FILE):
        folder.write_json(JOB_FILE, job.identity())
    elif folder.read_json(JOB_FILE) != job.identity():
        raise JumpLoRAError(f"{folder.uri} holds a run of another configuration: pass another --name")
