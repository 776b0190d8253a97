"""Glue between Ray and the library's continual loop: inside a worker of a Ray Train group (`train_fn_per_worker`,
data-parallel) or a one-process Ray Tune trial (`tune_trial`), build the workspace, restore the checkpoint, run the
library's loop with this worker's `Shard`, and report a checkpoint after every task. No training or evaluation logic
lives here: see `jumplora.continual` and `jumplora.distributed`."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path

import pyarrow.fs
import ray
import ray.train
import ray.train.torch
import torch
from ray import tune

from jumplora import checkpoints, cost
from jumplora.continual import (
    ContinualState,
    SingleTaskBaselines,
    Workspace,
    evaluate_mid_task,
    evaluate_test_row,
    evaluated_examples,
    prepare,
    run_continual,
    seen_tasks,
    single_task_accuracy,
    summarise,
)
from jumplora.distributed import SINGLE, Shard
from jumplora.results import RunResults
from jumplora.runtime import describe_runtime
from jumplora.training import Watch
from ray_jobs.jobs import RUNG, RUNG_DEV, Job, Rungs, SingleTask, Trial, Work
from ray_jobs.storage import Storage

RUN_DIR = "run"  # the final `jumplora` run directory, under the run's storage folder
RECORD = "metrics.json"  # the checkpoint of a single-task run holds its metrics only
A0_METRICS = ("a0", "seconds", "steps", "device_hours", "device_unit")  # what a single-task run reports


class TrainSession:
    """Inside a Ray Train worker group."""

    def __init__(self) -> None:
        context = ray.train.get_context()
        self.shard = Shard(context.get_world_rank(), context.get_world_size(), context.get_local_rank())
        device = ray.train.torch.get_device()
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL collectives (the barrier too) use the current device
        self.device = str(device)
        self.latest_checkpoint = ray.train.get_checkpoint

    @staticmethod
    def report(metrics: dict, directory: str | None) -> None:
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory) if directory else None)


class TuneSession:
    """A Ray Tune function trainable: one process."""

    shard = SINGLE
    device = "auto"
    latest_checkpoint = staticmethod(tune.get_checkpoint)

    @staticmethod
    def report(metrics: dict, directory: str | None) -> None:
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory) if directory else None)


def train_fn_per_worker(config: dict) -> None:
    """Ray Train V2 entry point (one call per worker): `config` = {"trial": Trial, "start": checkpoint or None}."""
    run_trial(config["trial"], config.get("start"), TrainSession())


def tune_trial(config: dict, trials: dict[str, Trial], start=None) -> None:
    """Ray Tune function trainable for one-process trials; `config["trial"]` is the trial's id in `trials`."""
    run_trial(trials[config["trial"]], start, TuneSession())


def run_trial(trial: Trial, start, session) -> None:
    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    ws = workspace(trial.job, session.device, session.shard)
    if isinstance(trial.work, SingleTask):
        task = ws.tasks[trial.work.task]
        record = single_task_accuracy(ws, trial.work.task, session.shard, progress=False)
        count, unit = cost.devices(describe_runtime(ws.config, session.shard.world, ws.device))
        work = Work(record.steps, 0, evaluated_examples(ws, (task,), "test"))
        report_with_record(session, {"task": trial.work.task + 1, "a0": record.test[0], "seconds": record.seconds,
                                     "steps": record.steps, "device_hours": count * record.seconds / 3600,
                                     "device_unit": unit, **work.metrics()})
        return
    state = resume(ws, session.latest_checkpoint(), start, warn=session.shard.rank == 0)
    work, rung_dev = Work(), []  # what this trial runs; the mean dev accuracy at each rung it passes
    rungs = trial.work.rungs
    watch = rung_watch(ws, trial.work.stop - 1, rungs, session, work, rung_dev) if rungs else None
    state = run_continual(ws, state, session.shard, progress=False, stop=trial.work.stop, test=trial.work.test,
                          on_task=lambda ws, state, t: report_task(ws, state, session, work, rung_dev), watch=watch)
    if trial.work.publish and session.shard.rank == 0:
        publish(ws, state, Storage(trial.work.publish))


def rung_watch(ws: Workspace, t: int, rungs: Rungs, session, work: Work, rung_dev: list[float]) -> Watch:
    """At each rung of training t: the seen tasks' dev accuracy on the rung subset, reported (`RUNG`, its dev mean
    and its past-task and current-task parts). The report returns when the search lets the trial go on; a trial the
    search cuts is stopped by Tune while it waits (`ray_jobs.halving`)."""

    def at_rung(step: int) -> None:
        accuracies = evaluate_mid_task(ws, t, rungs.examples, session.shard)
        work.dev_examples += evaluated_examples(ws, seen_tasks(ws, t), "dev", rungs.examples)
        rung_dev.append(math.fsum(accuracies) / len(accuracies))
        session.report({RUNG: len(rung_dev), "rung_step": step, RUNG_DEV: list(rung_dev),
                        **dev_parts(accuracies, "rung_dev"), **work.metrics(steps_now=step)}, None)

    return Watch(t, frozenset(rungs.steps), at_rung)


def dev_parts(accuracies: list[float], prefix: str = "dev") -> dict[str, float]:
    """The mean over the seen tasks, over the past ones (none after task 1) and the current one's."""
    past = accuracies[:-1]
    return {f"{prefix}_mean": math.fsum(accuracies) / len(accuracies), f"{prefix}_current": accuracies[-1],
            **({f"{prefix}_past": math.fsum(past) / len(past)} if past else {})}


def workspace(job: Job, device: str, shard: Shard = SINGLE) -> Workspace:
    """The library's `prepare` (data, the base model from the node's cache, encoded splits) on `device`."""
    return prepare(dataclasses.replace(job.run, device=device), Path(job.cache_dir), progress=False, shard=shard)


def resume(ws: Workspace, latest, start, warn: bool) -> ContinualState:
    """The trial's newest undamaged checkpoint (`latest`, then the earlier ones of its folder), else its `start`, else
    a fresh state: see `checkpoints.load_newest_intact` (one warning line per trial, from rank 0)."""
    candidates = [*([latest, *earlier_checkpoints(latest)] if latest else []), *([start] if start else [])]
    return checkpoints.load_newest_intact(((c.path, c.as_directory()) for c in candidates), ws, warn)


def earlier_checkpoints(checkpoint) -> list[ray.train.Checkpoint]:
    """The checkpoints saved before `checkpoint` in its folder, newest first: Ray names them in time order
    (`checkpoint_000003`, or `checkpoint_<date>_<time>` in Ray Train)."""
    folder, name = checkpoint.path.rstrip("/").rsplit("/", 1)
    found = checkpoint.filesystem.get_file_info(pyarrow.fs.FileSelector(folder))
    names = sorted((info.base_name for info in found if info.type == pyarrow.fs.FileType.Directory
                    and info.base_name.startswith("checkpoint_") and info.base_name < name), reverse=True)
    return [ray.train.Checkpoint(f"{folder}/{other}", filesystem=checkpoint.filesystem) for other in names]


def restore(ws: Workspace, checkpoint) -> ContinualState:
    """Exactly `checkpoint` (a chosen trial's): a damaged one is an error, `checkpoints.DamagedCheckpointError`."""
    if checkpoint is None:
        return ContinualState()
    with checkpoint.as_directory() as directory:
        return checkpoints.load(Path(directory), ws)


def report_task(ws: Workspace, state: ContinualState, session, work: Work, rung_dev: list[float]) -> None:
    """Every worker reports (Ray Train waits for all); rank 0 attaches the checkpoint. With the metrics: the dev mean
    and its parts (`dev_parts`), the rungs' dev means (a λ search) and what the trial ran so far (`Work`)."""
    record, done = state.records[-1], len(state.records)
    seen = seen_tasks(ws, done - 1)
    work.steps += record.steps
    work.dev_examples += evaluated_examples(ws, seen, "dev")
    if record.test:
        work.test_examples += evaluated_examples(ws, seen, "test")
    # this training's wall seconds, for its cost (a grid sums its trials')
    metrics = {"tasks_done": done, "lam": record.lam, **dev_parts(record.dev), **work.metrics(),
               "seconds": record.seconds}
    if rung_dev:
        metrics[RUNG_DEV] = list(rung_dev)
    if record.test:  # the seen tasks' mean (MTL: every task, after its one training)
        metrics["test_mean"] = math.fsum(record.test) / len(record.test)
    if session.shard.rank != 0:
        session.report(metrics, None)
        return
    with tempfile.TemporaryDirectory() as directory:
        checkpoints.save(Path(directory), ws, state)
        session.report(metrics, directory)


def report_with_record(session, metrics: dict) -> None:
    """Report `metrics` with a checkpoint holding just them: Ray Train keeps the metrics of checkpoints only."""
    if session.shard.rank != 0:
        session.report(metrics, None)
        return
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / RECORD).write_text(json.dumps(metrics))
        session.report(metrics, directory)


def publish(ws: Workspace, state: ContinualState, storage: Storage,
            baselines: SingleTaskBaselines | None = None) -> RunResults:
    """Write the `jumplora` run directory (`summarise` payload, merged updates) to `storage/run`."""
    results = summarise(ws, state, baselines)
    storage.publish_run(RUN_DIR, results, [record.update for record in state.records])
    return results


def with_test_row(job: Job, checkpoint, folder_uri: str, name: str) -> tuple[str, list[float], int]:
    """A Ray task: the checkpoint of a trial that evaluated dev only (a λ-grid trial), with the test row of its last
    task filled in, saved as the checkpoint folder `name` of `folder_uri`; returns its path, that row and the number
    of test examples evaluated."""
    ws = workspace(job, "auto")
    state = restore(ws, checkpoint)
    evaluate_test_row(ws, state, progress=False)
    folder = Storage(folder_uri)
    with tempfile.TemporaryDirectory() as directory:
        checkpoints.save(Path(directory), ws, state)
        folder.delete(name)  # what an interrupted driver may have left
        folder.upload(Path(directory), name)
    evaluated = evaluated_examples(ws, seen_tasks(ws, len(state.records) - 1), "test")
    return folder.child(name).path, state.records[-1].test, evaluated


def publish_checkpoint(job: Job, checkpoint, baselines: SingleTaskBaselines | None, storage_uri: str) -> RunResults:
    """A Ray task: the run directory of a checkpoint (for example a grid's last selected trial)."""
    ws = workspace(job, "auto")
    return publish(ws, restore(ws, checkpoint), Storage(storage_uri), baselines)
