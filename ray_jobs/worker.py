"""What runs inside a Ray worker: the library's continual loop, data-parallel over the workers of a Ray Train
group (`train_fn_per_worker`) or in one process as a Ray Tune trial (`tune_trial`).

Data parallelism. Every worker runs `jumplora.training.train_task` with `shard=(rank, world)`: it takes
`global_idx[rank::world]` of each global batch of the single-process loop (in `--micro-batches` pieces) and divides
its summed CE by the global batch's label-token count, so the workers' gradients add up to the single-process
gradient. `Shard.sum_gradients`
all-reduces (SUM) the adapter's gradients before clipping and the optimizer step. The adapter is created afresh for
every task and merged away at its end, so wrapping the model in DistributedDataParallel once does not fit; one
flattened all-reduce per step does the same job (gloo on CPU, NCCL on GPU).

Evaluation. Each worker decodes a contiguous slice of every task's examples (slices partition the examples: nothing
is duplicated or dropped, unlike a padded DistributedSampler) and the correct / seen counts are summed.

A unit of work (`config["work"]`): `{"mode": "sequence", "stop": n}` trains tasks up to n from the latest
checkpoint, or from `config["start"]`, reporting a checkpoint after every task (`{"lam": λ, "task": t}` sets the
λ of task t, for a grid trial); `{"mode": "single_task", "task": j}` trains task j alone from the base model and
reports its test accuracy a0[j] (SPEC §4).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray import tune

from jumplora.config import RunConfig
from jumplora.continual import ContinualState, Workspace, prepare, summarise, task_seed
from jumplora.evaluation import exact_match_flags
from jumplora.methods import get_method
from jumplora.training import train_task
from ray_jobs import checkpoints
from ray_jobs.storage import Storage

PAUSE_TASK_ENV = "JUMPLORA_TEST_PAUSE_AT_TASK"  # test hook: pause in the middle of this task (1-based), once
PAUSE_DIR_ENV = "JUMPLORA_TEST_PAUSE_DIR"  # … writing `rank<r>.pid` there, so that a test can kill a worker
PAUSE_SECONDS = 600
RUN_DIR = "run"  # the final `jumplora` run directory, under the run's storage folder
RECORD = "metrics.json"  # the checkpoint of a single-task run holds its metrics only


@dataclass(frozen=True)
class Shard:
    """This process's place in the worker group; collectives are skipped for a single process."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    def bounds(self, n: int) -> tuple[int, int]:
        """A contiguous slice; the slices of all ranks partition range(n)."""
        return n * self.rank // self.world, n * (self.rank + 1) // self.world

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients over the workers (one flattened all-reduce). Which parameters have a gradient is the
        same on every worker (it depends on the step only, e.g. τ before S_start has none)."""
        grads = [p.grad for p in params if p.grad is not None]
        flat = self.sum_(torch.cat([g.reshape(-1) for g in grads]))
        for grad, summed in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            grad.copy_(summed.view_as(grad))

    def in_turn(self, build):
        """`build()` on the first worker of each node, then on the others (which then find the node's cache)."""
        first = self.local_rank == 0
        if self.world > 1 and not first:
            dist.barrier()
        result = build()
        if self.world > 1 and first:
            dist.barrier()
        return result


@dataclass(frozen=True)
class PauseHook:
    """Test hook: every worker sleeps once after the gradients of step 2 of task `task` (1-based), after writing
    its PID to `directory/rank<r>.pid`; a restarted worker finds the file and goes on."""

    task: int
    directory: str

    def wrap(self, reduce, t: int, rank: int):
        marker = Path(self.directory) / f"rank{rank}.pid"
        if t + 1 != self.task or marker.exists():
            return reduce
        calls = itertools.count(1)

        def reduce_then_pause(params):
            if reduce is not None:
                reduce(params)
            if next(calls) == 2 and not marker.exists():
                marker.write_text(str(os.getpid()))
                time.sleep(PAUSE_SECONDS)

        return reduce_then_pause


def pause_from_env() -> dict | None:
    """The test hook's settings, read on the driver; they travel to the workers in their config."""
    if PAUSE_TASK_ENV not in os.environ:
        return None
    return {"task": int(os.environ[PAUSE_TASK_ENV]), "directory": os.environ[PAUSE_DIR_ENV]}


class TrainSession:
    """Inside a Ray Train worker group."""

    def __init__(self) -> None:
        context = ray.train.get_context()
        self.shard = Shard(context.get_world_rank(), context.get_world_size(), context.get_local_rank())
        device = ray.train.torch.get_device()
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL collectives (the barrier too) use the current device
        self.device = str(device)

    @staticmethod
    def latest_checkpoint():
        return ray.train.get_checkpoint()

    @staticmethod
    def report(metrics: dict, directory: str | None) -> None:
        checkpoint = ray.train.Checkpoint.from_directory(directory) if directory else None
        ray.train.report(metrics, checkpoint=checkpoint)


class TuneSession:
    """A Ray Tune function trainable: one process."""

    shard = Shard()
    device = "auto"

    @staticmethod
    def latest_checkpoint():
        return tune.get_checkpoint()

    @staticmethod
    def report(metrics: dict, directory: str | None) -> None:
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory) if directory else None)


def train_fn_per_worker(config: dict) -> None:
    """Ray Train V2 entry point (one call per worker)."""
    run_work(config, TrainSession())


def tune_trial(config: dict, job: dict | None = None, start=None) -> None:
    """Ray Tune function trainable for one-process trials; `config["trial"]` is the trial's unit of work."""
    run_work({"job": job, "start": start, **config["trial"]}, TuneSession())


def run_work(config: dict, session) -> None:
    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    ws = session.shard.in_turn(lambda: prepare_workspace(config["job"], session.device))
    if config["work"]["mode"] == "single_task":
        run_single_task(ws, config["work"]["task"], session)
    else:
        run_sequence(ws, config, session)


def run_single_task(ws: Workspace, t: int, session) -> None:
    accuracy = single_task_accuracy(ws, t, session.shard)
    report_with_record(session, {"task": t + 1, "a0": accuracy})


def run_sequence(ws: Workspace, config: dict, session) -> None:
    """Tasks from the latest checkpoint (or `start`) up to `stop`, a checkpoint after each; then the run dir."""
    work = config["work"]
    if "lam" in work:
        ws = with_lambda(ws, work["task"], work["lam"])
    state = restore(ws, session.latest_checkpoint() or config.get("start"))
    pause = PauseHook(**config["pause"]) if config.get("pause") else None
    for t in range(len(state.accuracy), work["stop"]):
        train_and_evaluate(ws, state, t, session.shard, pause)
        report_task(ws, state, session)
    if config.get("publish") and session.shard.rank == 0:
        publish(ws, state, Storage(config["publish"]))


def prepare_workspace(job: dict, device: str) -> Workspace:
    """The library's `prepare` (data, tiny model from the node's cache, encoded splits), cut to `max_tasks`."""
    config = dataclasses.replace(RunConfig(**job["run"]), device=device)
    ws = prepare(config, Path(job["cache_dir"]), progress=False)
    n = job["max_tasks"] or len(ws.tasks)
    return dataclasses.replace(ws, tasks=ws.tasks[:n], lambdas=ws.lambdas[:n])


def with_lambda(ws: Workspace, t: int, lam: float) -> Workspace:
    lambdas = list(ws.config.lambdas)
    lambdas[t] = lam
    config = dataclasses.replace(ws.config, lambdas=lambdas)
    return dataclasses.replace(ws, config=config, lambdas=lambdas[: len(ws.tasks)])


def restore(ws: Workspace, checkpoint) -> ContinualState:
    if checkpoint is None:
        return ContinualState()
    with checkpoint.as_directory() as directory:
        return checkpoints.load(Path(directory), ws)


def gradient_reducer(shard: Shard, pause: PauseHook | None, t: int):
    reduce = shard.sum_gradients if shard.world > 1 else None
    return pause.wrap(reduce, t, shard.rank) if pause else reduce


def train_and_evaluate(ws: Workspace, state: ContinualState, t: int, shard: Shard, pause: PauseHook | None) -> None:
    """`jumplora.continual.run_task`, data-parallel: train task t on this worker's shards, merge, evaluate."""
    config, task = ws.config, ws.tasks[t]
    log = train_task(ws.model, ws.encoded[task]["train"], task_name=task, task_seed=task_seed(config.seed, t),
                     lam=ws.lambdas[t], past=state.past.weights, config=config, pad_id=ws.tokenizer.pad_token_id,
                     device=ws.device, shard=(shard.rank, shard.world),
                     reduce_gradients=gradient_reducer(shard, pause, t), progress=False)
    if get_method(config.method).uses_ella:
        state.past.add(log.updates)
    shares = torch.tensor(log.ce, dtype=torch.float64, device=ws.device)
    state.ce.append(shard.sum_(shares).tolist())  # each worker logged its share of the global batch's CE
    state.penalty.append(log.penalty)
    state.thresholds.append(log.thresholds)
    state.task_updates.append({name: u.cpu() for name, u in log.updates.items()})
    state.accuracy.append(evaluate_sharded(ws, ws.tasks[: t + 1], "test", shard))
    state.dev_accuracy.append(evaluate_sharded(ws, ws.tasks[: t + 1], "dev", shard))


def evaluate_sharded(ws: Workspace, tasks, split: str, shard: Shard) -> list[float]:
    """Accuracy per task; each worker decodes its contiguous slice, then (correct, seen) are summed."""
    counts = torch.zeros(len(tasks), 2, dtype=torch.float64)
    for i, task in enumerate(tasks):
        start, end = shard.bounds(len(ws.encoded[task][split]))
        mine = ws.encoded[task][split][start:end]
        flags = exact_match_flags(ws.model, ws.tokenizer, mine, batch_size=ws.config.eval_batch_size,
                                  device=ws.device, progress=False, mode=ws.config.eval_mode) if mine else []
        counts[i] = torch.tensor([sum(flags), len(flags)], dtype=torch.float64)
    counts = shard.sum_(counts.to(ws.device)).cpu()
    for task, (_, seen) in zip(tasks, counts.tolist(), strict=True):
        assert seen == len(ws.encoded[task][split]), "every example is evaluated exactly once"
    return [correct / seen if seen else 0.0 for correct, seen in counts.tolist()]


def report_task(ws: Workspace, state: ContinualState, session) -> None:
    """Every worker reports (Ray Train waits for all); rank 0 attaches the checkpoint."""
    done = len(state.accuracy)
    metrics = {"tasks_done": done, "lam": ws.lambdas[done - 1], "dev_mean": math.fsum(state.dev_accuracy[-1]) / done,
               "test_mean": math.fsum(state.accuracy[-1]) / done}
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


def single_task_accuracy(ws: Workspace, t: int, shard: Shard) -> float:
    """a0[t] as `jumplora.continual.single_task_accuracies` computes it: task t alone from the base model."""
    config, task = ws.config, ws.tasks[t]
    train_task(ws.model, ws.encoded[task]["train"], task_name=task, task_seed=task_seed(config.seed, t), lam=0.0,
               past={}, config=config, pad_id=ws.tokenizer.pad_token_id, device=ws.device,
               shard=(shard.rank, shard.world), reduce_gradients=gradient_reducer(shard, None, t), progress=False)
    return evaluate_sharded(ws, [task], "test", shard)[0]


def publish(ws: Workspace, state: ContinualState, storage: Storage, a0: list[float] | None = None) -> dict:
    """Write the `jumplora` run directory (`summarise` payload, merged updates) to `storage/run`."""
    results = summarise(ws, state, a0)
    storage.publish_run(RUN_DIR, results, state.task_updates)
    return results


def publish_checkpoint(job: dict, checkpoint, a0: list[float] | None, storage_uri: str) -> dict:
    """A Ray task: the run directory of a checkpoint (for example a grid's last selected trial)."""
    ws = prepare_workspace(job, "auto")
    return publish(ws, restore(ws, checkpoint), Storage(storage_uri), a0)
