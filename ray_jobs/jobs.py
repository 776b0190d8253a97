"""A job: the resolved run configuration (λ always as an explicit list), checked on the driver before anything is
scheduled, as the plain dict the workers receive: `{"run": RunConfig fields, "max_tasks": n | None, "cache_dir"}`."""

from __future__ import annotations

import dataclasses

from jumplora.config import RunConfig, parse_lambdas
from jumplora.data import load_benchmark, order_tasks
from jumplora.errors import JumpLoRAError
from jumplora.methods import get_method
from jumplora.training import check_enough_steps
from ray_jobs import spaces
from ray_jobs.storage import Storage

JOB_FILE = "job.json"


def order_length(config: RunConfig) -> int:
    return len(order_tasks(config.data_dir, config.order))


def with_lambdas(config: RunConfig, text: str) -> RunConfig:
    """`paper` / `paper-grid` (search_spaces/lambdas.yaml) or `v1,v2,...`, one per task of the whole order."""
    n_tasks = order_length(config)  # first: an unknown order is the clearest message
    if not get_method(config.method).uses_ella:
        return set_lambdas(config, [0.0] * n_tasks)
    if text in spaces.LAMBDA_TABLES:
        return set_lambdas(config, spaces.paper_lambdas(text, config))
    return set_lambdas(config, parse_lambdas(text))


def set_lambdas(config: RunConfig, values: list[float]) -> RunConfig:
    resolved = dataclasses.replace(config, lambdas=list(values))
    resolved.resolve_lambdas(order_length(config))  # checks the count
    return resolved


def check(config: RunConfig, max_tasks: int | None, workers: int) -> tuple[str, ...]:
    """The tasks the job trains; refuses what would fail later: unknown order, too few steps, too many workers."""
    tasks = order_tasks(config.data_dir, config.order)
    if max_tasks is not None and max_tasks > len(tasks):
        raise JumpLoRAError(f"--max-tasks {max_tasks}, but order {config.order} has {len(tasks)} tasks")
    tasks = tasks[: max_tasks or len(tasks)]
    if config.batch_size % workers:
        raise JumpLoRAError(f"the global batch of {config.batch_size} cannot be split evenly over {workers} workers")
    benchmark = load_benchmark(config.data_dir, seed=config.seed, max_train_per_task=config.max_train_per_task,
                               max_eval_per_task=config.max_eval_per_task, strict=config.strict, tasks=tasks)
    for task in tasks:
        n_train = len(benchmark.tasks[task].train)
        check_enough_steps(task, n_train, config.batch_size)
        if 0 < n_train % config.batch_size < workers:
            raise JumpLoRAError(f"task {task!r}: the last global batch has {n_train % config.batch_size} example(s), "
                                f"fewer than the {workers} workers; change --max-train-per-task or the worker count")
    return tasks


def make(config: RunConfig, max_tasks: int | None, cache_dir: str) -> dict:
    return {"run": config.to_dict(), "max_tasks": max_tasks, "cache_dir": cache_dir}


def identity(job: dict) -> dict:
    """What must match for a job to resume another one's files (not where the cache is, nor the device)."""
    run = {key: value for key, value in job["run"].items() if key != "device"}
    return {"run": run, "max_tasks": job["max_tasks"]}


def claim(folder: Storage, job: dict) -> None:
    """Record the job in its storage folder, or check that the folder holds this very job (then it resumes)."""
    if folder.exists(JOB_FILE):
        if folder.read_json(JOB_FILE) != identity(job):
            raise JumpLoRAError(f"{folder.uri} holds a run of another configuration: pass another --name")
        return
    folder.write_json(JOB_FILE, identity(job))
