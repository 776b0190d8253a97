"""Fixtures for the data tests: the shared real data (skipped when absent) and tiny hand-made CL_Benchmark folders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jumplora.data.tasks import DEFAULT_TASK_SPECS

REAL_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "CL_Benchmark"
TINY_TASKS = {
    "senti": {"path": "SC/senti", "instruction": "Is it good?\n", "options": ["pos", "neg"]},
    "topic": {"path": "TC/topic", "instruction": "Which topic?\n", "options": ["a", "b", "c"]},
}

Records = list[dict[str, str]]


def _records(label_counts: dict[str, int], prefix: str) -> Records:
    return [
        {"sentence": f"{prefix} {label} {i}", "label": label}
        for label, count in label_counts.items()
        for i in range(count)
    ]


def _write_json(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


@pytest.fixture
def real_data_dir() -> Path:
    if not (REAL_DATA / "tasks.json").is_file():
        pytest.skip(f"the shared CL_Benchmark data is not at {REAL_DATA}")
    return REAL_DATA


@pytest.fixture
def make_records() -> Callable[[dict[str, int], str], Records]:
    """`make_records({"pos": 2}, "train")` -> two examples labelled pos, texts 'train pos 0', 'train pos 1'."""
    return _records


@pytest.fixture
def write_json() -> Callable[[Path, object], Path]:
    return _write_json


@pytest.fixture
def tiny_splits() -> dict[str, dict[str, Records]]:
    """Clean splits for both TINY_TASKS: senti 8/3/4 and topic 6/2/3 examples per class (train/dev/test)."""
    sizes = {"senti": (8, 3, 4), "topic": (6, 2, 3)}
    return {
        task: {
            split: _records(dict.fromkeys(TINY_TASKS[task]["options"], count), split)
            for split, count in zip(("train", "dev", "test"), sizes[task], strict=True)
        }
        for task in TINY_TASKS
    }


@pytest.fixture
def write_folder(tmp_path: Path) -> Callable[..., Path]:
    """`write_folder(splits, tasks=TINY_TASKS, orders=None)` writes a CL_Benchmark folder and returns its path;
    `splits` maps task -> split -> records; tasks=None writes no tasks.json (the default specs apply)."""

    def write(
        splits: dict[str, dict[str, Records]], tasks: dict | None = TINY_TASKS, orders: dict | None = None
    ) -> Path:
        root = tmp_path / "CL_Benchmark"
        root.mkdir(exist_ok=True)
        if tasks is not None:
            _write_json(root / "tasks.json", {"orders": orders or {"1": list(tasks)}, "tasks": tasks})
        paths = tasks or {name: {"path": spec.path} for name, spec in DEFAULT_TASK_SPECS.items()}
        for task, by_split in splits.items():
            for split, content in by_split.items():
                _write_json(root / paths[task]["path"] / f"{split}.json", content)
        return root

    return write
