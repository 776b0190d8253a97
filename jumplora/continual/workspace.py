"""Set-up of a continual run: the order's tasks, their data read and tokenised, the base model on its device
(`prepare` → `Workspace`); what the loop has built so far (`ContinualState`); which examples and tasks a training
or an evaluation reads."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora.adapter_kinds import targets
from jumplora.config import RunConfig, check_precision
from jumplora.data import load_benchmark, order_tasks
from jumplora.data.encode import Encoded, PromptEncoder
from jumplora.data.types import Benchmark
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import JumpLoRAError
from jumplora.families import is_causal
from jumplora.lambdas import resolve_lambdas
from jumplora.methods import check, get_method
from jumplora.record import TaskRecord
from jumplora.steps import check_enough_steps

if TYPE_CHECKING:  # the data side (`run_benchmark`, `seen_tasks`: the Ray driver's) loads no torch
    import torch


@dataclass
class Workspace:
    """Everything a run reads before training: data, tokenised splits, the base model."""

    config: RunConfig
    benchmark: Benchmark
    tasks: tuple[str, ...]  # the order's tasks, cut to `config.max_tasks`
    lambdas: list[float]  # λ per task of `tasks`
    model: torch.nn.Module
    tokenizer: object
    encoded: dict[str, dict[str, list[Encoded]]]  # task → split → examples
    device: torch.device


@dataclass
class ContinualState:
    """What the loop has built after some tasks; enough to resume after the last finished task."""

    records: list[TaskRecord] = field(default_factory=list)  # one per finished task, in order (MTL: one in all)
    # what the method remembers of past tasks (ELLA's W_past, EWC's Fisher, O-LoRA's past A), on the training device
    memory: dict[str, torch.Tensor] = field(default_factory=dict)
    runtime: dict | None = None  # how the records were trained (`describe_runtime`); a checkpoint keeps it

    def matrix(self, split: str = "test") -> list[list[float]]:
        """The accuracy rows a[i][j], j ≤ i, of `split` ("test" or "dev")."""
        return [record.test if split == "test" else record.dev for record in self.records]


def resolve_device(name: str) -> torch.device:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def start_device(device: torch.device, precision: str) -> None:
    """The one-off start-up of a fresh process on a CUDA device (context, cuBLAS handles, which a finished thread
    leaves in PyTorch's pool, the allocator's first blocks, a matmul's kernels in the run's precision): `prepare` runs
    it in a thread of its own while it reads the data, so a Ray worker does not pay it in its first training step."""
    import torch

    from jumplora.precision import autocast

    x = torch.ones(64, 64, device=device, requires_grad=True)  # no random draw: RNG states untouched
    with autocast(device, precision):
        (x @ x).float().sum().backward()
    torch.cuda.synchronize(device)


def run_benchmark(config: RunConfig, tasks: tuple[str, ...]) -> Benchmark:
    """The tasks' data as a run of `config` loads them: its seed, caps and strictness."""
    return load_benchmark(config.data_dir, seed=config.seed, max_train_per_task=config.max_train_per_task,
                          max_eval_per_task=config.max_eval_per_task, strict=config.strict, tasks=tasks)


def prepare(config: RunConfig, cache_dir: Path, progress: bool = True, shard: Shard = SINGLE) -> Workspace:
    """Load and check everything before any training, so that bad input fails fast and writes nothing. The base
    model is loaded by one worker per node first (it may build the node's tiny-preset cache), then by the others.
    On CUDA the device starts up meanwhile (`start_device`)."""
    from jumplora.adapters.base import find_targets  # model code: not for the data side's callers
    from jumplora.models import load_model

    check(config)  # the method exists and its adapter takes these settings
    device = resolve_device(config.device)
    check_precision(config.precision, device)  # `auto` may have resolved to the CPU
    starting = ThreadPoolExecutor(1, "device-start")  # its one thread ends at `shutdown`
    started = starting.submit(start_device, device, config.precision) if device.type == "cuda" else None
    all_tasks = order_tasks(config.data_dir, config.order)
    tasks = all_tasks[: config.max_tasks or len(all_tasks)]
    benchmark = run_benchmark(config, tasks)
    lambdas = resolve_lambdas(config, len(all_tasks))[: len(tasks)]
    for task in tasks:
        check_enough_steps(task, len(benchmark.tasks[task].train), config.batch_size)
    model, tokenizer = shard.in_turn(lambda: load_model(config.model, data_dir=config.data_dir, cache_dir=cache_dir,
                                                        progress=progress, dropout_rate=config.model_dropout))
    find_targets(model, targets(config, model))  # every name of --target-modules names some linear
    model.to(device).requires_grad_(False)
    encoder = PromptEncoder(tokenizer, config.max_source_tokens, config.max_target_tokens, causal=is_causal(model))
    for task in tasks:
        check_room_for_text(encoder, benchmark.tasks[task].spec)
    encoded = {
        task: {split: encoder.encode_all(benchmark.tasks[task].spec, benchmark.tasks[task].split(split))
               for split in ("train", "dev", "test")}
        for task in tasks
    }
    if started is not None:
        started.result()  # raises the start-up's error, if any, here
    starting.shutdown()
    return Workspace(config, benchmark, tasks, lambdas, model, tokenizer, encoded, device)


def check_room_for_text(encoder: PromptEncoder, spec) -> None:
    """The prompt (instruction, options, answer cue) must leave the example text at least one token: otherwise every
    text is cut away and the task is trained on its prompt alone."""
    room = encoder.text_room(spec)
    if room < 1:
        limit = encoder.max_source_tokens
        raise JumpLoRAError(f"task {spec.name!r}: its prompt (instruction + options) takes {limit - room} of the "
                            f"--max-source-tokens {limit} tokens, leaving no room for the text: raise "
                            "--max-source-tokens or shorten the task's instruction or options")


def task_seed(seed: int, task_index: int) -> int:
    return seed * 1000 + task_index


def subset_indices(n: int, limit: int | None, seed: int, task: str, split: str) -> list[int]:
    """Which of the `n` examples of `task`'s `split` an evaluation with `limit` reads: all, or a fixed subset of
    `limit` drawn from its own generator seeded by (run seed, task, split): the same at every rung and for every λ,
    and the global RNG (dropout, adapter initialisation) is not touched."""
    if limit is None or limit >= n:
        return list(range(n))
    return sorted(random.Random(f"subset:{seed}:{task}:{split}").sample(range(n), limit))


def subset(ws: Workspace, task: str, split: str, limit: int | None) -> list[Encoded]:
    """The examples `subset_indices` names."""
    examples = ws.encoded[task][split]
    return [examples[i] for i in subset_indices(len(examples), limit, ws.config.seed, task, split)]


def n_trainings(ws: Workspace) -> int:
    """How many trainings the run has: one per task, or one in all for a joint method (MTL)."""
    return 1 if get_method(ws.config.method).joint else len(ws.tasks)


def seen_tasks(ws: Workspace, t: int) -> tuple[str, ...]:
    """The tasks evaluated after training t: those of the order so far (MTL: all of them)."""
    return ws.tasks if get_method(ws.config.method).joint else ws.tasks[: t + 1]


def training_examples(ws: Workspace, t: int) -> tuple[str, list[Encoded]]:
    """Training t's name and examples: task t of the order's; for a joint method (MTL) "mtl" and the union of the
    order's tasks."""
    if get_method(ws.config.method).joint:
        return "mtl", [example for task in ws.tasks for example in ws.encoded[task]["train"]]
    return ws.tasks[t], ws.encoded[ws.tasks[t]]["train"]
