"""Glue between Ray and the library's continual loop, in a Ray Train worker (`train_fn_per_worker`, data-parallel) or
a one-process Tune trial (`trials.tune_trial`): build the workspace, restore the checkpoint, run the library's loop
with this worker's `Shard`, report a checkpoint after every task. No training or evaluation logic lives here."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import ray
import ray.train
import ray.train.torch
import torch
from ray.train.torch import TorchTrainer

from jumplora import checkpoints, continual
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import DivergedError
from jumplora.runtime import describe_runtime
from jumplora.storage import Storage, earlier_folders
from ray_jobs.cluster import WorkerRequest
from ray_jobs.jobs import GROUP, LambdaGroup, Sequence, SingleTask, Trial, Work, a0_metrics, rung_watch, task_metrics
from ray_jobs.publishing import publish

RECORD = "metrics.json"  # the checkpoint of a single-task run (a λ group) holds its metrics only


@dataclass(frozen=True)
class Session:
    """Where a trial runs: the Ray API it reports through (`ray.train` in a Ray Train worker group, `ray.tune` in a
    one-process Tune trial: each has `report`, `Checkpoint` and `get_checkpoint`), its shard and its device."""

    api: ModuleType
    shard: Shard = SINGLE
    device: str = "auto"

    def report(self, metrics: dict, directory: str | None) -> None:
        self.api.report(metrics, checkpoint=self.api.Checkpoint.from_directory(directory) if directory else None)


def trainer(trial: Trial, start, request: WorkerRequest, name: str, storage_path: str, max_failures: int,
            kept: int | None = None) -> TorchTrainer:
    """A TorchTrainer of `request`'s workers (`train_fn_per_worker`) that runs `trial` from `start`, as Ray Train's run
    `name` under `storage_path`, restarted up to `max_failures` times, keeping its `kept` newest checkpoints."""
    resources = {"CPU": request.cpus, **({"GPU": request.gpus} if request.gpus else {})}
    return TorchTrainer(
        train_fn_per_worker, train_loop_config={"trial": trial, "start": start},
        scaling_config=ray.train.ScalingConfig(num_workers=request.workers, use_gpu=request.gpus > 0,
                                               resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_path,
                                       failure_config=ray.train.FailureConfig(max_failures=max_failures),
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=kept)))


def train_fn_per_worker(config: dict) -> None:
    """Ray Train V2 entry point (one call per worker): `config` = {"trial": Trial, "start": checkpoint or None}."""
    context, device = ray.train.get_context(), ray.train.torch.get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL collectives (the barrier too) use the current device
    shard = Shard(context.get_world_rank(), context.get_world_size(), context.get_local_rank())
    run_trial(config["trial"], config.get("start"), Session(ray.train, shard, str(device)))


def run_trial(trial: Trial, start, session: Session) -> None:
    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    ws = trial.job.workspace(session.device, session.shard)
    RUNS[type(trial.work).__name__](ws, trial.work, start, session)


def run_single(ws: continual.Workspace, single: SingleTask, start, session) -> None:
    """Task `single.task` alone from the base model: its a0 (`jobs.a0_metrics`)."""
    t = single.task
    record = continual.single_task_accuracy(ws, t, session.shard, progress=False)
    metrics = a0_metrics(t, record, describe_runtime(ws.config, session.shard.world, ws.device),
                         continual.evaluated_examples(ws, ws.tasks[t : t + 1], "test"))
    # with a checkpoint that holds just the metrics: Ray Train keeps the metrics of checkpoints only
    report(session, metrics, lambda directory: (directory / RECORD).write_text(json.dumps(metrics)))


def run_sequence(ws: continual.Workspace, sequence: Sequence, start, session) -> None:
    """The order's tasks up to `sequence.stop` from the newest checkpoint, a report and checkpoint after each
    (`report_task`); then the run directory, if asked."""
    state = resume(ws, session.api.get_checkpoint(), start, warn=session.shard.rank == 0)
    work = Work()
    state = continual.run_continual(ws, state, session.shard, progress=False, stop=sequence.stop,
                                    on_task=lambda ws, state, t: report_task(ws, state, session, work))
    if sequence.publish and session.shard.rank == 0:
        publish(ws, state, Storage(sequence.publish), merged_model=sequence.merged_model)


def run_group(ws: continual.Workspace, group: LambdaGroup, start, session) -> None:
    """Every λ of `group` from the stage's start (a retried group trains them all again), each λ's checkpoint saved
    by rank 0 while the model holds its weights, then one report of every λ's metrics (`jobs.task_metrics`, its own
    `Work`; its seconds its share of the stack's, so that a stage's seconds add up to its device time) and checkpoint;
    a λ that diverged fails the trial after the others are reported, with the one line it gives alone. A group of one
    compared at rungs reports at each (`jobs.rung_watch`) and waits for the search there."""
    state = resume(ws, None, start, warn=session.shard.rank == 0)
    state.runtime = describe_runtime(ws.config, session.shard.world, ws.device)  # as `run_continual` sets it
    works, rung_dev, folder, saved = [Work() for _ in group.lambdas], [], Storage(group.folder), {}
    watch = rung_watch(ws, group.task, group.rungs, session.shard, works[0], rung_dev,
                       lambda metrics: session.report(metrics, None)) if group.rungs else None

    def keep(k: int, outcome: continual.ContinualState) -> None:
        if session.shard.rank == 0:
            with tempfile.TemporaryDirectory() as directory:  # the checkpoint records the λ that trained it
                lambdas = [*ws.lambdas[: group.task], group.lambdas[k], *ws.lambdas[group.task + 1:]]
                checkpoints.save(Path(directory), dataclasses.replace(ws, lambdas=lambdas), outcome)
                folder.replace_folder(Path(directory), group.ids[k])  # over what a failed attempt left
            saved[k] = folder.child(group.ids[k]).path

    outcomes = continual.run_task_group(ws, state, group.task, group.lambdas, session.shard, progress=False,
                                        test=group.test, watch=watch, keep=keep)
    members = {lam_id: {"metrics": task_metrics(outcome.records[-1], len(outcome.records), work.count(ws, outcome),
                                                rung_dev), "checkpoint": saved.get(k)}
               for k, (lam_id, outcome, work) in enumerate(zip(group.ids, outcomes, works, strict=True))
               if not isinstance(outcome, DivergedError)}
    # with a checkpoint that holds just the members: Ray Train keeps the metrics of checkpoints only
    report(session, {GROUP: members}, lambda directory: (directory / RECORD).write_text(json.dumps(members)))
    diverged = next((outcome for outcome in outcomes if isinstance(outcome, DivergedError)), None)
    if diverged is not None:
        raise diverged


# a unit of work's runner, by its class's name: `ray_jobs` reaches a Ray Train worker by value, where a work's class is
# a copy of the driver's, not the class this module imports
RUNS = {kind.__name__: run for kind, run in ((SingleTask, run_single), (Sequence, run_sequence),
                                            (LambdaGroup, run_group))}


def resume(ws: continual.Workspace, latest, start, warn: bool) -> continual.ContinualState:
    """The trial's newest undamaged checkpoint (`latest`, then the earlier ones of its folder), else its `start`, else
    a fresh state: see `checkpoints.load_newest_intact` (one warning line per trial, from rank 0)."""
    candidates = [*([latest, *earlier_checkpoints(latest)] if latest else []), *([start] if start else [])]
    return checkpoints.load_newest_intact(((c.path, c.as_directory()) for c in candidates), ws, warn)


def earlier_checkpoints(checkpoint) -> list[ray.train.Checkpoint]:
    """The checkpoints saved before `checkpoint` in its folder, newest first (`storage.earlier_folders`)."""
    return [ray.train.Checkpoint(path, filesystem=checkpoint.filesystem)
            for path in earlier_folders(checkpoint.filesystem, checkpoint.path, "checkpoint_")]


def report_task(ws: continual.Workspace, state: continual.ContinualState, session, work: Work) -> None:
    """The trial's report after a training (`jobs.task_metrics`; what it ran so far: `Work`) and its checkpoint."""
    metrics = task_metrics(state.records[-1], len(state.records), work.count(ws, state))
    report(session, metrics, lambda directory: checkpoints.save(directory, ws, state))


def report(session, metrics: dict, write: Callable[[Path], None]) -> None:
    """Every worker reports (Ray Train waits for all); rank 0 attaches a checkpoint, the folder `write` fills."""
    if session.shard.rank != 0:
        session.report(metrics, None)
        return
    with tempfile.TemporaryDirectory() as directory:
        write(Path(directory))
        session.report(metrics, directory)
