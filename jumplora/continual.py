"""The continual loop: task order → datasets → model + adapter → train one task → merge → evaluate seen tasks."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from jumplora import analysis, metrics
from jumplora.config import RunConfig
from jumplora.data import load_benchmark, order_tasks
from jumplora.data.encode import Encoded, PromptEncoder, normalise_answer
from jumplora.data.pretraining import supervised_mixture, tokenizer_corpus
from jumplora.data.types import Benchmark
from jumplora.evaluation import accuracy
from jumplora.methods import PastUpdates, get_method
from jumplora.models import TINY, load_model
from jumplora.training import check_enough_steps, train_task

logger = logging.getLogger(__name__)

BASE_MODEL_SEED = 0  # the tiny preset's base is the same for every run seed, as a pretrained checkpoint would be


@dataclass
class Workspace:
    """Everything a run reads before training: data, tokenised splits, the base model."""

    config: RunConfig
    benchmark: Benchmark
    tasks: tuple[str, ...]
    lambdas: list[float]
    model: torch.nn.Module
    tokenizer: object
    encoded: dict[str, dict[str, list[Encoded]]]
    device: torch.device


@dataclass
class ContinualState:
    """What the loop has built after some tasks; enough to resume after the last finished task."""

    accuracy: list[list[float]] = field(default_factory=list)  # a[i][j], j ≤ i, test
    dev_accuracy: list[list[float]] = field(default_factory=list)
    ce: list[list[float]] = field(default_factory=list)
    penalty: list[list[float]] = field(default_factory=list)
    thresholds: list[dict[str, float]] = field(default_factory=list)
    task_updates: list[dict[str, torch.Tensor]] = field(default_factory=list)
    past: PastUpdates = field(default_factory=PastUpdates)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def prepare(config: RunConfig, cache_dir: Path, progress: bool = True) -> Workspace:
    """Load and check everything before any training, so that bad input fails fast and writes nothing."""
    tasks = order_tasks(config.data_dir, config.order)
    benchmark = load_benchmark(config.data_dir, seed=config.seed, max_train_per_task=config.max_train_per_task,
                               max_eval_per_task=config.max_eval_per_task, strict=config.strict, tasks=tasks)
    lambdas = config.resolve_lambdas(len(tasks))
    for task in tasks:
        check_enough_steps(task, len(benchmark.tasks[task].train), config.batch_size)
    texts, supervised = None, ()
    if config.model == TINY:  # built from the whole data source (uncapped), so one base serves every order and cap
        source = load_benchmark(config.data_dir, seed=BASE_MODEL_SEED)
        texts, supervised = tokenizer_corpus(source), supervised_mixture(source, BASE_MODEL_SEED)
    model, tokenizer = load_model(config.model, texts=texts, cache_dir=cache_dir, seed=BASE_MODEL_SEED,
                                  progress=progress, dropout_rate=config.model_dropout, supervised=supervised)
    device = resolve_device(config.device)
    model.to(device).requires_grad_(False)
    encoder = PromptEncoder(tokenizer, config.max_source_tokens, config.max_target_tokens)
    encoded = {
        task: {split: encoder.encode_all(benchmark.tasks[task].spec, benchmark.tasks[task].split(split))
               for split in ("train", "dev", "test")}
        for task in tasks
    }
    return Workspace(config, benchmark, tasks, lambdas, model, tokenizer, encoded, device)


def task_seed(seed: int, task_index: int) -> int:
    return seed * 1000 + task_index


def evaluate_seen(ws: Workspace, upto: int, split: str, progress: bool) -> list[float]:
    """Accuracy of the current (merged) model on tasks 0..upto of the order."""
    return [
        accuracy(ws.model, ws.tokenizer, ws.encoded[task][split], batch_size=ws.config.eval_batch_size,
                 device=ws.device, desc=f"{split} {task}", progress=progress, mode=ws.config.eval_mode)
        for task in ws.tasks[: upto + 1]
    ]


def run_task(ws: Workspace, state: ContinualState, t: int, progress: bool = True) -> None:
    """Train task t on top of the merged model, merge, and append its row of accuracies to `state`."""
    config, task = ws.config, ws.tasks[t]
    log = train_task(ws.model, ws.encoded[task]["train"], task_name=task, task_seed=task_seed(config.seed, t),
                     lam=ws.lambdas[t], past=state.past.weights, config=config,
                     pad_id=ws.tokenizer.pad_token_id, device=ws.device, progress=progress)
    if get_method(config.method).uses_ella:
        state.past.add(log.updates)  # W_past += β ΔW_final, on the training device
    state.ce.append(log.ce)
    state.penalty.append(log.penalty)
    state.thresholds.append(log.thresholds)
    state.task_updates.append({name: u.cpu() for name, u in log.updates.items()})
    state.accuracy.append(evaluate_seen(ws, t, "test", progress))
    state.dev_accuracy.append(evaluate_seen(ws, t, "dev", progress))
    logger.info("task %d/%d %s: test accuracy on seen tasks %s", t + 1, len(ws.tasks), task,
                " ".join(f"{a:.3f}" for a in state.accuracy[-1]))


def run_continual(ws: Workspace, state: ContinualState | None = None, progress: bool = True,
                  on_task: Callable[[Workspace, ContinualState, int], None] | None = None) -> ContinualState:
    """For each task in order (resuming after the tasks already in `state`): train, merge, evaluate; then
    `on_task(ws, state, t)` (tracking)."""
    state = state or ContinualState()
    for t in range(len(state.accuracy), len(ws.tasks)):
        run_task(ws, state, t, progress)
        if on_task is not None:
            on_task(ws, state, t)
    return state


def single_task_accuracies(ws: Workspace, base_state: dict[str, torch.Tensor], cache_dir: Path,
                           progress: bool = True) -> list[float]:
    """a0[j]: the same adapter trained on task j alone from the base model (SPEC §4), cached per task.

    The cache key holds what decides the number: the config (not the order or λ), the base model's build, the data
    fingerprint and the task's seed, which depends on the task's position in the order (so orders that put the task
    elsewhere never share an a0)."""
    config = ws.config
    base_model = Path(str(getattr(ws.model, "name_or_path", ""))).name  # tiny-<fingerprint> for the tiny preset
    config_key = config.digest(exclude=("order", "lambdas", "single_task_baselines", "extra"))
    key = hashlib.sha256(f"{config_key}:{base_model}".encode()).hexdigest()[:16]
    results = []
    for t, task in enumerate(ws.tasks):
        seed = task_seed(config.seed, t)
        path = cache_dir / "single_task" / f"{task}-taskseed{seed}-{key}-{ws.benchmark.fingerprint[:16]}.json"
        if path.exists():
            results.append(json.loads(path.read_text())["accuracy"])
            continue
        model = copy.deepcopy(ws.model)
        model.load_state_dict(base_state)
        solo = Workspace(config, ws.benchmark, (task,), [0.0], model, ws.tokenizer, ws.encoded, ws.device)
        train_task(model, ws.encoded[task]["train"], task_name=task, task_seed=seed, lam=0.0,
                   past={}, config=config, pad_id=ws.tokenizer.pad_token_id, device=ws.device, progress=progress)
        value = evaluate_seen(solo, 0, "test", progress)[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"task": task, "task_seed": seed, "base_model": base_model, "accuracy": value,
                                   "config": config.to_dict()}))
        tmp.replace(path)
        results.append(value)
    return results


def summarise(ws: Workspace, state: ContinualState, a0: list[float] | None) -> dict:
    """The `results.json` payload: config, matrices, OA/BWT/FWT (percent), sparsity, overlap, thresholds, λ."""
    size = len(ws.tasks)
    padded = [row + [None] * (size - len(row)) for row in state.accuracy]
    dev_padded = [row + [None] * (size - len(row)) for row in state.dev_accuracy]
    return {
        "order": ws.config.order,
        "tasks": list(ws.tasks),
        "method": ws.config.method,
        "config": ws.config.to_dict(),
        "seed": ws.config.seed,
        "data_fingerprint": ws.benchmark.fingerprint,
        "accuracy_matrix": padded,
        "dev_accuracy_matrix": dev_padded,
        "single_task_accuracy": a0,
        "majority_baseline": [metrics.majority_baseline([normalise_answer(e.label) for e in ws.encoded[t]["test"]])
                              for t in ws.tasks],
        "oa": metrics.overall_accuracy(padded),
        "bwt": metrics.backward_transfer(padded),
        "fwt": metrics.forward_transfer(padded, a0) if a0 is not None else None,
        "sparsity": [
            {"overall": analysis.overall_sparsity(u), "per_layer": analysis.layer_sparsity(u),
             "per_module": analysis.module_sparsity(u)}
            for u in state.task_updates
        ],
        "jaccard": {
            "matrix": analysis.jaccard_matrix(state.task_updates),
            "middle_block": analysis.middle_encoder_block(list(state.task_updates[0])),
            "mean_with_earlier_middle_block": analysis.overlap_with_earlier(state.task_updates),
        },
        "thresholds": state.thresholds,
        "lambdas": ws.lambdas,
        "loss_curves": {"ce": state.ce, "penalty": state.penalty},
    }
