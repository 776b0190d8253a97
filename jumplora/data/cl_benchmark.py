"""Load a CL_Benchmark folder: `tasks.json` plus `<task path>/{train,dev,test}.json` for every task.

After validation (`jumplora.data.validate`) every task goes through the paper's sampling protocol
(`sample_with_protocol`), then the optional caps (`cap_task`). Every random choice comes from `random.Random` seeded
with a string made of the seed, the task and the step, so the same seed gives the same examples on every run and
machine.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from jumplora.data.tasks import read_json, task_table
from jumplora.data.types import Benchmark, Example, RowCounts, TaskData, TaskSpec
from jumplora.data.validate import (
    SPLITS,
    SourceTokenCounter,
    SplitReport,
    count_too_long,
    raise_if_empty_splits,
    raise_if_strict_problems,
    report_warnings,
    validate_task,
)
from jumplora.errors import JumpLoRAError

TEST_PER_CLASS = 500
POOL_PER_CLASS = 1000
TRAIN_FRACTION = 0.8


def load_cl_benchmark(data_dir: str | Path, *, seed: int = 42, max_train_per_task: int | None = None,
                      max_eval_per_task: int | None = None, strict: bool = False,
                      tasks: Iterable[str] | None = None) -> Benchmark:
    """Read, validate and sample the tasks of a CL_Benchmark folder (all of them, or only `tasks`).

    `orders` always lists every order of the folder's `tasks.json` (or the paper's six when it has none);
    `tasks` holds only the loaded tasks."""
    root, orders, written = _read_folder(data_dir, tasks)
    return prepare_benchmark("cl_benchmark", written, orders, source=str(root), seed=seed,
                             max_train_per_task=max_train_per_task, max_eval_per_task=max_eval_per_task, strict=strict)


def validate_cl_benchmark(data_dir: str | Path, *, tasks: Iterable[str] | None = None,
                          count_source_tokens: SourceTokenCounter | None = None, max_source_tokens: int = 512,
                          allow_duplicate_keys: bool = False) -> list[SplitReport]:
    """The validation report of every task and split of a folder as written (no sampling); `too_long` counts the
    usable examples when `count_source_tokens(spec, text)` (a source's tokens) is given. Print it with
    `format_report`. `allow_duplicate_keys`: a tasks.json naming a task twice is read (the last entry wins) instead
    of refused."""
    reports: list[SplitReport] = []
    for task in _read_folder(data_dir, tasks, allow_duplicate_keys)[2].values():
        splits, task_reports = validate_task(task.spec, {split: task.split(split) for split in SPLITS})
        if count_source_tokens is not None:
            task_reports = [replace(report, too_long=count_too_long(task.spec, splits[report.split],
                                                                    count_source_tokens, max_source_tokens))
                            for report in task_reports]
        reports += task_reports
    return reports


def prepare_benchmark(name: str, written: dict[str, TaskData], orders: dict[int, tuple[str, ...]], *, source: str,
                      seed: int, max_train_per_task: int | None, max_eval_per_task: int | None,
                      strict: bool) -> Benchmark:
    """Validate the tasks as written (a split left with no usable example is an error), apply the protocol and the
    caps, and fingerprint the result. Each task's test rows before the caps are counted (`RowCounts`): labelled,
    and labelled outside the options (dropped; at most `TEST_PER_CLASS` of each such label, as the protocol samples
    every class of the test file)."""
    sampled: dict[str, TaskData] = {}
    reports: list[SplitReport] = []
    counts: dict[str, RowCounts] = {}
    for task_name, task in written.items():
        usable, task_reports = validate_task(task.spec, {split: task.split(split) for split in SPLITS})
        raise_if_empty_splits(task_reports, source)
        sampled[task_name] = sample_with_protocol(task.spec, usable, seed)
        reports += task_reports
        outside = next(r for r in task_reports if r.split == "test").unknown_labels
        counts[task_name] = RowCounts(len(sampled[task_name].test),
                                       sum(min(n, TEST_PER_CLASS) for n in outside.values()))
    if strict:
        raise_if_strict_problems(reports, source)
    capped = {key: cap_task(task, seed, max_train_per_task, max_eval_per_task) for key, task in sampled.items()}
    return make_benchmark(name, capped, orders, report_warnings(reports), counts)


def _read_folder(data_dir: str | Path, tasks: Iterable[str] | None,
                 allow_duplicate_keys: bool = False) -> tuple[Path, dict[int, tuple[str, ...]], dict[str, TaskData]]:
    """The folder, its orders, and its tasks (all of them, or only `tasks`) as written: not yet validated."""
    root = _existing_dir(data_dir)
    orders, specs = task_table(root, allow_duplicate_keys)
    return root, orders, {name: _read_task(root, specs[name]) for name in select_tasks(specs, tasks, str(root))}


def _existing_dir(data_dir: str | Path) -> Path:
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise JumpLoRAError(f"data directory {root} does not exist: point it at a CL_Benchmark folder "
                            "(build one with jumplora.data.builder.build_cl_benchmark)")
    return root


def task_specs(data_dir: str | Path, allow_duplicate_keys: bool = False) -> dict[str, TaskSpec]:
    """The task specs of a CL_Benchmark folder (its tasks.json, else the paper's)."""
    return task_table(_existing_dir(data_dir), allow_duplicate_keys)[1]


def select_tasks(specs: dict[str, TaskSpec], tasks: Iterable[str] | None, source: str) -> list[str]:
    """The requested task names (all when None), checked against the known ones."""
    names = list(specs) if tasks is None else list(dict.fromkeys(tasks))
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise JumpLoRAError(f"unknown task(s) {', '.join(unknown)} in {source}: known tasks are {', '.join(specs)}")
    return names


def _read_task(root: Path, spec: TaskSpec) -> TaskData:
    """The examples of `<root>/<spec.path>/{train,dev,test}.json`, as written."""
    return TaskData(spec, **{split: _read_examples(root / spec.path / f"{split}.json", spec) for split in SPLITS})


def _read_examples(path: Path, spec: TaskSpec) -> list[Example]:
    records = read_json(path, list, "every task folder needs train.json, dev.json and test.json",
                        "rebuild or fix the file", f"a JSON list of {{{spec.text_key!r}, {spec.label_key!r}}}")
    keys = (spec.text_key, spec.label_key)
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in keys):
            raise JumpLoRAError(f"{path}: item {index} must be an object with string fields {keys[0]!r} and "
                                f"{keys[1]!r}, got {record!r:.80}")
    return [Example(text=record[keys[0]], label=record[keys[1]]) for record in records]


def sample_with_protocol(spec: TaskSpec, splits: dict[str, list[Example]], seed: int) -> TaskData:
    """Test: ≤ 500 per class. Train+dev pool: if it holds more than 1000 × classes, keep ≤ 1000 per class and
    re-split it 80/20 per class; otherwise keep the given train and dev."""
    rng = random.Random(f"{seed}/{spec.name}/protocol")
    test = _take(splits["test"], sample_per_class(_labels(splits["test"]), TEST_PER_CLASS, rng))
    pool = splits["train"] + splits["dev"]
    if len(pool) <= POOL_PER_CLASS * len(spec.options):
        return TaskData(spec, train=splits["train"], dev=splits["dev"], test=test)
    pool = _take(pool, sample_per_class(_labels(pool), POOL_PER_CLASS, rng))
    train, dev = split_per_class(_labels(pool), TRAIN_FRACTION, rng)
    return TaskData(spec, train=_take(pool, train), dev=_take(pool, dev), test=test)


def _labels(examples: Sequence[Example]) -> list[str]:
    return [example.label for example in examples]


def _take(examples: Sequence[Example], indices: Iterable[int]) -> list[Example]:
    return [examples[index] for index in indices]


def _indices_by_class(labels: Sequence[Any]) -> dict[Any, list[int]]:
    by_class: dict[Any, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    return by_class


def sample_per_class(labels: Sequence[Any], cap: int, rng: random.Random) -> list[int]:
    """Indices keeping at most `cap` of every class (a random choice where a class has more), in original order."""
    chosen: list[int] = []
    for indices in _indices_by_class(labels).values():
        chosen += indices if len(indices) <= cap else rng.sample(indices, cap)
    return sorted(chosen)


def split_per_class(labels: Sequence[Any], fraction: float, rng: random.Random) -> tuple[list[int], list[int]]:
    """Shuffle each class and cut it at `round(fraction * size)`: (first part, rest), each shuffled."""
    first: list[int] = []
    rest: list[int] = []
    for indices in _indices_by_class(labels).values():
        shuffled = rng.sample(indices, len(indices))
        cut = round(fraction * len(shuffled))
        first += shuffled[:cut]
        rest += shuffled[cut:]
    rng.shuffle(first)
    rng.shuffle(rest)
    return first, rest


def stratified_subsample(labels: Sequence[Any], size: int, rng: random.Random) -> list[int]:
    """`min(size, len(labels))` indices in original order; each class gets its proportional share (largest
    remainders, ties to the class seen first), chosen at random within the class."""
    size = min(size, len(labels))
    by_class = _indices_by_class(labels)
    shares = {label: size * len(indices) / len(labels) for label, indices in by_class.items()}
    quotas = {label: int(share) for label, share in shares.items()}
    by_remainder = sorted(shares, key=lambda label: shares[label] - quotas[label], reverse=True)
    for label in by_remainder[: size - sum(quotas.values())]:
        quotas[label] += 1
    return sorted(index for label, indices in by_class.items() for index in rng.sample(indices, quotas[label]))


def cap_task(task: TaskData, seed: int, max_train: int | None, max_eval: int | None) -> TaskData:
    """The task with train cut to `max_train` and dev, test each cut to `max_eval` (None: no cap)."""
    for name, cap in (("max_train_per_task", max_train), ("max_eval_per_task", max_eval)):
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise JumpLoRAError(f"{name} must be a positive whole number of examples or None, got {cap!r}")
    splits = {}
    for split, cap in (("train", max_train), ("dev", max_eval), ("test", max_eval)):
        examples = task.split(split)
        if cap is None or len(examples) <= cap:
            splits[split] = list(examples)
        else:
            rng = random.Random(f"{seed}/{task.spec.name}/{split}/cap")
            splits[split] = _take(examples, stratified_subsample(_labels(examples), cap, rng))
    return TaskData(task.spec, **splits)


def make_benchmark(name: str, tasks: dict[str, TaskData], orders: dict[int, tuple[str, ...]], report: list[str],
                   test_rows: dict[str, RowCounts] | None = None) -> Benchmark:
    """A Benchmark with its fingerprint computed from `tasks` and `orders`."""
    return Benchmark(name=name, tasks=tasks, orders=orders, fingerprint=fingerprint(tasks, orders), report=report,
                     test_rows=test_rows or {})


def fingerprint(tasks: dict[str, TaskData], orders: dict[int, tuple[str, ...]]) -> str:
    """sha256 over the orders, then per task (by name) its spec and every example of train, dev and test in order:
    one canonical JSON line each, so it is the same on every run and machine."""
    items: list[object] = [{str(order): list(names) for order, names in sorted(orders.items())}]
    for name in sorted(tasks):
        items.append(asdict(tasks[name].spec))
        for split in SPLITS:
            items += [split, *([example.text, example.label] for example in tasks[name].split(split))]
    return _digest(items)


def task_test_fingerprint(task: TaskData) -> str:
    """sha256 over a task's name and its test examples in order, one canonical JSON line each as `fingerprint`: the
    identity of the examples a run scores the task on, the same whatever the order of tasks or the training caps
    (`uncertainty.task_key`: the runs that scored them share their bootstrap draws)."""
    return _digest([task.spec.name, *([example.text, example.label] for example in task.split("test"))])


def _digest(items: Iterable[object]) -> str:
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n")
    return digest.hexdigest()
