"""The single-task baselines a0 (SPEC §4): each task trained alone from the base model, cached per task and keyed by
what decides the number."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from jumplora.adapters import LORA, AdapterKind
from jumplora.config import RunConfig
from jumplora.continual import evaluation, loop
from jumplora.continual.workspace import Workspace, task_seed
from jumplora.cost import Cost
from jumplora.data.types import RowCounts
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import writing
from jumplora.methods import adapter_kinds, get_method, plain_method
from jumplora.ownership import write_text
from jumplora.record import TaskRecord

SHARED_ADAPTER = LORA  # the a0 of `fwt_last_row`, the same for every method (`fwt`'s: the run's own kind)

NOT_IN_A0_KEY = ("order", "lambdas", "single_task_baselines", "max_tasks")


def single_task_config(config: RunConfig, adapter: AdapterKind | None = None) -> RunConfig:
    """The configuration of an a0 run of `adapter` (default: the run's own kind): the method that trains it alone
    (without settings of its own), the fields of the other adapter kinds at their defaults. Its digest
    (`single_task_key`) is the same for every method with that adapter, so a sweep or a cache trains each task alone
    once per seed and kind."""
    adapter = adapter or get_method(config.method).adapter
    defaults = RunConfig()
    unused = {name for kind in adapter_kinds() if kind != adapter for name in kind.fields} - set(adapter.fields)
    return dataclasses.replace(config, method=plain_method(adapter).name, single_task_baselines=False, settings=None,
                               **{name: getattr(defaults, name) for name in sorted(unused)})


def single_task_key(config: RunConfig) -> str:
    """What decides an a0 of `config` (an a0 configuration), except the task, its seed and the data: the digest of the
    configuration without the order, λ or the task limit."""
    return config.digest(exclude=NOT_IN_A0_KEY)


def single_task_accuracy(ws: Workspace, t: int, shard: Shard = SINGLE, progress: bool = True) -> TaskRecord:
    """a0[t] (SPEC §4): the adapter of `ws.config` trained on task t alone (λ = 0) from the weights of `ws.model`,
    which must be the base model; the model is changed (merged). Returns the training's record, its test accuracy
    (`record.test`, one value: a0[t]) and flags (`record.test_flags`) and its seconds filled in."""
    started = time.monotonic()
    record = loop.train(ws, t, 0.0, None, shard, progress)
    found = evaluation.evaluate(ws, ws.tasks[t : t + 1], "test", shard, progress)
    record.test, record.test_flags = found.accuracies, found.flags
    record.seconds = time.monotonic() - started
    return record


def single_task_accuracies(ws: Workspace, base_state: dict[str, torch.Tensor], cache_dir: Path,
                           progress: bool = True, adapter: AdapterKind | None = None,
                           cost: Cost | None = None) -> evaluation.Evaluation:
    """a0 of every task of the order with `adapter` (default: the run's own kind; `single_task_config`) and its test
    flags (None when a task's a0 was read from a cache entry written before flags were kept), each on a copy of the
    base model (`base_state`), cached per task; the trainings it runs are added to `cost`. The cache key holds what
    decides the number: the a0 configuration (`single_task_key`: the adapter kind, not the method), the base model's
    build, the data fingerprint, the task's seed (its position in the order) and, with `--authors-compat`, how many
    rows labelled outside the options the task has (scored as wrong)."""
    config = single_task_config(ws.config, adapter)
    ws = dataclasses.replace(ws, config=config)
    base_model = Path(str(getattr(ws.model, "name_or_path", ""))).name  # tiny-<fingerprint> for the tiny preset
    config_key = f"{single_task_key(config)}:{base_model}"  # the same for every task
    results, kept = [], []
    for t, task in enumerate(tqdm(ws.tasks, desc="single-task baselines", disable=not progress, leave=False)):
        seed = task_seed(config.seed, t)
        unlabelled = ws.benchmark.test_rows.get(task, RowCounts(0)).unlabelled if config.authors_compat else 0
        parts = config_key + (f":unlabelled{unlabelled}" if unlabelled else "")
        key = hashlib.sha256(parts.encode()).hexdigest()[:16]
        path = cache_dir / "single_task" / f"{task}-taskseed{seed}-{key}-{ws.benchmark.fingerprint[:16]}.json"
        if path.exists():
            entry = json.loads(path.read_text())
        else:
            model = copy.deepcopy(ws.model)
            model.load_state_dict(base_state)
            record = single_task_accuracy(dataclasses.replace(ws, model=model), t, progress=progress)
            if cost is not None:
                cost.add(record)
            entry = {"task": task, "task_seed": seed, "base_model": base_model, "accuracy": record.test[0],
                     "flags": record.test_flags[0], "config": config.to_dict()}
            with writing(path.parent):
                path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, json.dumps(entry))
        results.append(entry["accuracy"])
        kept.append(entry.get("flags"))  # None in an entry written before flags were kept
    return evaluation.Evaluation(results, None if None in kept else kept)


@dataclass
class SingleTaskBaselines:
    """a0 of every task of the order (SPEC §4): `own`, trained with the run's adapter kind (SPEC's FWT), and `shared`,
    plain LoRA, the same for every method (FWT last row, as the authors' script and the paper's column); `cost`: the
    single-task trainings this run ran (cached a0 cost it nothing)."""

    own: list[float]
    shared: list[float] | None  # None: not trained (a λ grid of a JumpLoRA or EWC method: `ray_jobs.grid`)
    cost: Cost = field(default_factory=Cost)
    own_flags: list[str] | None = None  # each task's test flags (`jumplora.flags`); None: not kept
    shared_flags: list[str] | None = None

    @classmethod
    def after_first(cls, rest: list[float], rest_flags: list[str | None], shared: bool, cost: Cost,
                    first: TaskRecord) -> SingleTaskBaselines:
        """A λ grid's a0 (`ray_jobs.grid`): tasks 2..T trained alone (`rest`, their flags), and task 1's a0 taken
        from the run's first training (`first`: task 1 at λ = 0 from the base model, the same computation), its
        accuracy and flags alike; `shared`: the run's adapter is plain LoRA, so the row is FWT last row's too."""
        own = [first.test[0], *rest]
        flags = [first.test_flags[0], *rest_flags] if first.test_flags and None not in rest_flags else None
        return cls(own, list(own) if shared else None, cost, flags, flags if shared else None)


def single_task_baselines(ws: Workspace, base_state: dict[str, torch.Tensor], cache_dir: Path,
                          progress: bool = True) -> SingleTaskBaselines:
    """Both a0 rows of the run (`single_task_accuracies`); for a method of plain LoRA they are the same row."""
    cost = Cost()
    own = single_task_accuracies(ws, base_state, cache_dir, progress, cost=cost)
    shared = own if get_method(ws.config.method).adapter is SHARED_ADAPTER else \
        single_task_accuracies(ws, base_state, cache_dir, progress, adapter=SHARED_ADAPTER, cost=cost)
    return SingleTaskBaselines(own.accuracies, list(shared.accuracies), cost, own.flags, shared.flags)
