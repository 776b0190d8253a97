"""Plain data types shared by the loaders, the synthetic benchmark, the encoder and the loop."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskSpec:
    """How one task is asked: the instruction and answer options put in front of every example."""

    name: str
    instruction: str
    options: tuple[str, ...]
    path: str = ""
    text_key: str = "sentence"
    label_key: str = "label"


@dataclass(frozen=True)
class Example:
    text: str
    label: str


@dataclass
class TaskData:
    """One task's three splits (already sampled with the protocol and validated)."""

    spec: TaskSpec
    train: list[Example]
    dev: list[Example]
    test: list[Example]

    def split(self, name: str) -> list[Example]:
        return {"train": self.train, "dev": self.dev, "test": self.test}[name]


@dataclass(frozen=True)
class RowCounts:
    """A task's test rows as the protocol sampled them, before any cap: those labelled with an option (the split) and
    those whose label is none of the options (MNLI's "-"), which validation drops from the split. The authors' script
    scores the whole file, so those rows count as wrong there (`metrics.authors_accuracy`)."""

    labelled: int
    unlabelled: int = 0


@dataclass
class Benchmark:
    """A set of tasks and the orders over them; `fingerprint` changes whenever any example changes."""

    name: str
    tasks: dict[str, TaskData]
    orders: dict[int, tuple[str, ...]]
    fingerprint: str
    report: list[str] = field(default_factory=list)
    test_rows: dict[str, RowCounts] = field(default_factory=dict)  # per task; absent: no row outside the options
