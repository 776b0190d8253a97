"""Check one task's train/dev/test examples, drop the unusable ones, and report what was found.

The policy is docs/DECISIONS.md's "Validation policy" (`strict=True` in the loaders raises a JumpLoRAError listing the
problems instead); a split left with no usable example is an error in the loaders, strict or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jumplora.data.types import Example, TaskSpec
from jumplora.errors import JumpLoRAError

SPLITS = ("train", "dev", "test")
_PRIORITY = ("test", "dev", "train")  # a text kept in an earlier split is removed from the later ones

SourceTokenCounter = Callable[[TaskSpec, str], int]


@dataclass(frozen=True)
class SplitReport:
    """What validation found in one split of one task; every count is a number of examples."""

    task: str
    split: str
    read: int
    kept: int
    unknown_labels: dict[str, int] = field(default_factory=dict)
    relabelled: int = 0
    empty_texts: int = 0
    duplicates: int = 0
    leaked: int = 0
    too_long: int | None = None
    classes: tuple[str, ...] = field(default=(), compare=False)  # the labels among the kept examples, sorted

    @property
    def problems(self) -> int:
        """Examples that were dropped or relabelled."""
        return self.read - self.kept + self.relabelled

    def findings(self) -> str:
        """The dropped, relabelled and too-long examples, e.g. '2 dropped, empty text; 1 relabelled …' ('' if none)."""
        labels = ", ".join(f"{label!r}: {count}" for label, count in sorted(self.unknown_labels.items()))
        counts = [(sum(self.unknown_labels.values()), f"dropped, label not an option ({labels})"),
                  (self.relabelled, "relabelled to an option differing only by case/whitespace"),
                  (self.empty_texts, "dropped, empty text"),
                  (self.duplicates, "dropped, duplicate text within the split"),
                  (self.leaked, f"dropped, text also in {'test' if self.split == 'dev' else 'dev/test'}"),
                  (self.too_long or 0, "longer than the maximum source length (text truncated)")]
        return "; ".join(f"{count} {what}" for count, what in counts if count)


def validate_task(spec: TaskSpec,
                  splits: Mapping[str, Sequence[Example]]) -> tuple[dict[str, list[Example]], list[SplitReport]]:
    """Return the usable examples of every split (labels spelled as the options) and one report per split."""
    kept: dict[str, list[Example]] = {}
    reports: dict[str, SplitReport] = {}
    texts_in_earlier_splits: set[str] = set()
    for split in (name for name in _PRIORITY if name in splits):
        kept[split], reports[split] = _clean_split(spec, split, splits[split], texts_in_earlier_splits)
        texts_in_earlier_splits.update(example.text for example in kept[split])
    order = [name for name in SPLITS if name in splits]
    return {name: kept[name] for name in order}, [reports[name] for name in order]


def _clean_split(spec: TaskSpec, split: str, examples: Sequence[Example],
                 texts_elsewhere: set[str]) -> tuple[list[Example], SplitReport]:
    canonical = _option_lookup(spec.options)
    unknown: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    kept: list[Example] = []
    for example in examples:
        label = canonical(example.label)
        if label is None:
            unknown[example.label] += 1
        elif not example.text.strip():
            counts["empty_texts"] += 1
        elif example.text in seen:
            counts["duplicates"] += 1
        elif example.text in texts_elsewhere:
            counts["leaked"] += 1
        else:
            counts["relabelled"] += label != example.label.strip()
            kept.append(Example(text=example.text, label=label))
            seen.add(example.text)
    report = SplitReport(spec.name, split, read=len(examples), kept=len(kept), unknown_labels=dict(unknown),
                         classes=tuple(sorted({example.label for example in kept})), **counts)
    return kept, report


def _fold(text: str) -> str:
    return " ".join(text.split()).lower()


def _option_lookup(options: Sequence[str]) -> Callable[[str], str | None]:
    """label -> the option it means, or None: exact after strip, else a unique case/whitespace-insensitive match."""
    folds = Counter(_fold(option) for option in options)
    by_fold = {_fold(option): option for option in options if folds[_fold(option)] == 1}
    exact = set(options)

    def canonical(label: str) -> str | None:
        stripped = label.strip()
        return stripped if stripped in exact else by_fold.get(_fold(stripped))

    return canonical


def count_too_long(spec: TaskSpec, examples: Iterable[Example], count_source_tokens: SourceTokenCounter,
                   max_source_tokens: int) -> int:
    """How many examples have a source (as counted by `count_source_tokens`) above `max_source_tokens`."""
    return sum(count_source_tokens(spec, example.text) > max_source_tokens for example in examples)


def raise_if_strict_problems(reports: Iterable[SplitReport], source: str) -> None:
    """The `strict=True` check: any dropped or relabelled example is an error."""
    lines = report_warnings([report for report in reports if report.problems])
    if lines:
        found = " | ".join(lines)
        raise JumpLoRAError(f"strict data check failed for {source}: {found} — fix the data or run without strict")


def raise_if_empty_splits(reports: Iterable[SplitReport], source: str) -> None:
    """Every split must keep at least one example: training, dev selection and the test scores need them all."""
    for report in reports:
        if not report.kept:
            why = report.findings() or "its file lists none"
            raise JumpLoRAError(f"task {report.task!r} of {source}: its {report.split} split has no usable example "
                                f"after validation ({why}): fix the data")


def blocking_findings(reports: Iterable[SplitReport]) -> list[str]:
    """What makes a run refuse the data: a split left with no usable example (`raise_if_empty_splits`)."""
    return [f"task {r.task!r}: its {r.split} split has no usable example ({r.findings() or 'its file lists none'})"
            for r in reports if not r.kept]


def one_class_findings(reports: Iterable[SplitReport]) -> list[str]:
    """Training splits that hold one class only: the task trains to give one answer, whatever the text."""
    return [f"task {r.task!r}: its train split holds one class only ({r.classes[0]!r}): the task trains to one answer"
            for r in reports if r.split == "train" and len(r.classes) == 1]


def report_warnings(reports: Iterable[SplitReport]) -> list[str]:
    """'task/split: findings' for every report with findings, for the benchmark's report."""
    return [f"{r.task}/{r.split}: {found}" for r in reports if (found := r.findings())]


_COLUMNS = ("task", "split", "read", "kept", "bad label", "relabelled", "empty", "dup", "leaked", "too long")


def format_report(reports: Sequence[SplitReport]) -> str:
    """A plain-text table with one row per task/split, then the labels found outside the options."""
    rows = [_COLUMNS, *(_row(report) for report in reports)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    unknown = [f"{r.task}/{r.split}: {r.unknown_labels}" for r in reports if r.unknown_labels]
    return "\n".join(lines + (["labels outside the options:", *unknown] if unknown else []))


def _row(r: SplitReport) -> tuple[str, ...]:
    counts = (r.read, r.kept, sum(r.unknown_labels.values()), r.relabelled, r.empty_texts, r.duplicates, r.leaked)
    return (r.task, r.split, *map(str, counts), "-" if r.too_long is None else str(r.too_long))
