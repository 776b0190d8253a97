"""The typed results that cross file and process boundaries: `RunResults`, what a run directory's `results.json`
holds (`continual.summarise` makes it, `outputs.write_run` writes it), and `StageRecord` / `TrialRecord`, a λ grid's
stage entry in its `manifest.json` (`ray_jobs.grid`). Each has `to_json` / `from_json` in the files' own layout.
Standard library only (and the light layers: the configuration's kinds, the method registry, the flags' format): a
reader of results needs neither torch, NumPy nor transformers.

Every reader reads `results.json` through `RunResults.from_json`, which refuses, in one line naming the field and
the problem, a `schema` other than `SCHEMA` (none: schema 1) and any value no run writes (`check_content`); whether a
run is continual or joint (MTL) comes from its method (`RunResults.joint`), never from a null field. What one reader
needs beyond what every file holds is its `Needs`."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jumplora import flags
from jumplora.config import RunConfig, option_fields, option_problem
from jumplora.errors import JumpLoRAError
from jumplora.kinds import FLOAT_LIMIT, INT_LIMIT, POSITIVE_INT, SEED
from jumplora.methods.registry import find

SCHEMA = 1  # the layout of results.json this package writes and reads

# the JSON types of a value of each annotation's outer type (`KINDS`)
JSON_TYPES = {"int": (int,), "str": (str,), "dict": (dict,), "list": (list,), "float": (int, float)}
REQUIRED = ("method", "order", "seed", "oa", "bwt")  # present in every results.json ever written (bwt null: MTL)
NOT_NULL = ("method", "order", "seed", "oa")
KIND_NAMES = {int: "an integer", str: "a string", dict: "an object", list: "a list", float: "a number"}
# the metrics, in percent (SPEC §4), and their ranges: OA and LA are means of accuracies, BWT, FWT and FWT last row
# means of differences of two
PERCENT = {"oa": (0, 100), "la": (0, 100), "bwt": (-100, 100), "fwt": (-100, 100), "fwt_last_row": (-100, 100)}
# what a fraction or a percentage computed in floating point may stray beyond its range (a Wilson bound of 1 + 2e-16)
SLACK = 1e-9
SCORINGS = ("wrong", "dropped")  # `unlabelled_test.scoring`: --authors-compat's, or the default
COST_KEYS = ("trainings", "optimizer_steps", "wall_seconds", "device_hours", "device_unit")  # in every `cost`
OPTIONS = {option.name: option for option in option_fields(RunConfig)}  # a recorded config's values: their kinds


@dataclass(kw_only=True)
class RunResults:
    """One continual run's outcome (`continual.summarise`): accuracies in [0, 1], OA / LA / BWT / FWT / FWT last row
    in percent (SPEC §4; LA the learning accuracy, the mean of the diagonal; LA, BWT and FWT None for a joint method,
    MTL; FWT None without single-task baselines). The nested values stay the JSON objects they are written as."""

    schema: int = SCHEMA
    order: int
    tasks: list[str] | None = None
    method: str
    config: dict | None = None  # `RunConfig.to_dict`
    seed: int
    data_fingerprint: str | None = None
    accuracy_matrix: list[list[float | None]] | None = None  # test a[i][j], j ≤ i (None beyond)
    dev_accuracy_matrix: list[list[float | None]] | None = None
    single_task_accuracy: list[float] | None = None  # a0 of the run's own adapter kind: FWT's
    single_task_accuracy_shared: list[float] | None = None  # a0 of plain LoRA: FWT last row's
    unlabelled_test: dict | None = None  # {"scoring", "rows", "labelled_rows"}
    majority_baseline: list[float] | None = None
    oa: float
    la: float | None = None  # learning accuracy, mean_j a[j][j] (None: MTL, or written before it was recorded)
    bwt: float | None
    fwt: float | None = None
    fwt_last_row: float | None = None
    intervals: dict | None = None  # `uncertainty.RunIntervals.to_json`; None: written before flags were kept
    sparsity: list[dict] | None = None  # per training: {"overall", "per_layer"}
    jaccard: dict | None = None  # {"matrix", "middle_block", "mean_with_earlier_middle_block"}
    thresholds: list[dict[str, float]] | None = None
    lambdas: list[float] | None = None
    loss_curves: dict | None = None  # {"ce": [per training], "penalty": [...]}
    runtime: dict | None = None  # `jumplora.runtime.describe_runtime`
    cost: dict | None = None  # `jumplora.cost.summary`
    # per-example right/wrong flags (`jumplora.flags.pack`) of each cell: row i holds tasks j ≤ i (MTL: every task);
    # the a0 rows' likewise (None: not kept, a run written before they were, or an a0 cached without them)
    test_flags: list[list[str]] | None = None
    dev_flags: list[list[str]] | None = None
    single_task_flags: list[str] | None = None
    single_task_flags_shared: list[str] | None = None
    # per task of `tasks`, the digest of its test examples (`data.cl_benchmark.task_test_fingerprint`): runs that
    # scored the same examples of a task share their resampled indices (`uncertainty.task_key`); None: written before
    # it was kept
    test_fingerprints: list[str] | None = None

    def learning_accuracy(self) -> float | None:
        """The learning accuracy (percent, `metrics.learning_accuracy`): `la`, or for a run written before it was
        recorded, the mean of its matrix's diagonal; None for a joint method (MTL) or without a matrix."""
        if self.la is not None or self.joint or not self.accuracy_matrix:
            return self.la
        from jumplora import metrics  # standard library only, as this module

        return metrics.learning_accuracy(self.accuracy_matrix)

    @property
    def joint(self) -> bool:
        """A joint method's run (MTL: one training on the union of the order's tasks, one row, `MethodSpec.joint`), as
        the method registry declares it (no torch); a method it does not hold (a plugin not installed here) reads as
        continual, the kind of every method but MTL."""
        spec = find(self.method)
        return spec is not None and spec.joint

    def unlabelled_rows(self) -> dict[str, tuple[int, int]]:
        """{task: (test rows labelled outside the options, labelled rows)} of the tasks that have any (MNLI's "-");
        {} for a run written before they were counted."""
        info = self.unlabelled_test or {}
        return {task: (rows, info["labelled_rows"][task]) for task, rows in (info.get("rows") or {}).items() if rows}

    def to_json(self) -> dict:
        """The `results.json` object: `schema` first, then every key in the order `KINDS` lists."""
        return {"schema": self.schema, **{name: getattr(self, name) for name in KINDS}}

    @classmethod
    def from_json(cls, data: object, source: str = "results.json", needs: Needs | None = None) -> RunResults:
        """The results of a `results.json` object, unknown keys left out; a JumpLoRAError naming `source` when it is
        not one this jumplora writes (the module's docstring) or lacks a field the reader `needs`."""
        if not isinstance(data, dict):
            raise JumpLoRAError(f"{source} does not hold a JSON object")
        schema = data.get("schema", 1)
        if schema != SCHEMA or isinstance(schema, bool):
            raise JumpLoRAError(f"{source} has schema {json.dumps(schema)}; this jumplora reads schema {SCHEMA}: read "
                                "it with the jumplora version that wrote it (upgrade jumplora)")
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise JumpLoRAError(f"{source} lacks {', '.join(repr(key) for key in missing)}")
        for name, kinds in KINDS.items():
            value = data.get(name)
            if value is None and name not in NOT_NULL:
                continue
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise JumpLoRAError(f"{source} holds a value of the wrong type ({name} must be {KIND_NAMES[kinds[-1]]}"
                                    f", got {shown(value)})")
        known = {name: data[name] for name in KINDS if name in data}
        where = first_non_finite(known)
        if where is not None:
            raise JumpLoRAError(f"{source} holds a number that is not finite ({where}): its training diverged, so "
                                "none of its numbers means anything; run it again with a smaller learning rate")
        results = cls(**known)
        try:
            check_size(known)
            check_content(results)
        except WrongValue as wrong:
            raise JumpLoRAError(f"{source} holds a wrong value ({wrong}): no run writes that, so the file was "
                                "changed or damaged; run it again") from None
        if needs is not None:
            needs.check(results, source)
        return results


# results.json's top-level keys, in the order they are written (RunResults' fields'), with the JSON types of each
# value (its annotation's outer type: `list` of `list[str] | None`); every value but those of `REQUIRED` may be null
# or absent (a file written before it was recorded)
KINDS: dict[str, tuple[type, ...]] = {f.name: JSON_TYPES[f.type.partition("[")[0].partition(" ")[0]]
                                      for f in dataclasses.fields(RunResults) if f.name != "schema"}


@dataclass(frozen=True)
class Needs:
    """What a reader needs of a `results.json` beyond what every one holds (a file written before a field was
    recorded lacks it): `fields`, each not null, and the keys `config_keys` in its config (null or not); `reader`
    names who needs them in the refusal."""

    reader: str
    fields: tuple[str, ...]
    config_keys: tuple[str, ...] = ()

    def check(self, results: RunResults, source: str) -> None:
        missing = [name for name in self.fields if getattr(results, name) is None]
        missing += [f"config.{key}" for key in self.config_keys
                    if results.config is not None and key not in results.config]
        if missing:
            raise JumpLoRAError(f"{source} lacks {', '.join(repr(name) for name in missing)} (null or missing), "
                                f"which {self.reader} needs: it was written without it, or changed since; run the "
                                "run again with this jumplora")


class WrongValue(Exception):
    """Where a results.json holds a value no run writes, and why: `RunResults.from_json` makes it one line."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}")


# the check of one value: a WrongValue naming `where` when it is not one a run writes
Check = Callable[[object, str], None]
# the fields listed per task or per training, which a file holds only beside its `tasks`
LISTED = ("accuracy_matrix", "dev_accuracy_matrix", "single_task_accuracy", "single_task_accuracy_shared",
          "unlabelled_test", "majority_baseline", "intervals", "sparsity", "jaccard", "thresholds", "lambdas",
          "loss_curves", "test_flags", "dev_flags", "single_task_flags", "single_task_flags_shared",
          "test_fingerprints")
PER_TASK = "one per task of tasks"  # why a list has as many entries as the run's tasks


def shown(value: object) -> str:
    return json.dumps(value)[:40]


def number(low: float = -FLOAT_LIMIT, high: float = FLOAT_LIMIT, what: str = "a number") -> Check:
    """The check of a number in [`low`, `high`], `what` naming it in the refusal."""
    def check(value: object, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WrongValue(where, f"must be {what}, got {shown(value)}")
        if not low - SLACK <= value <= high + SLACK:
            raise WrongValue(where, f"must be {what}, got {value:g}")
    return check


accuracy = number(0, 1, "an accuracy in [0, 1]")
fraction = number(0, 1, "a fraction in [0, 1]")
at_least_0 = number(0, what="a number ≥ 0")


def valid(ok: Callable[[object], bool], what: str) -> Check:
    """The check of a value that is `ok`, `what` naming what it must be in the refusal."""
    def check(value: object, where: str) -> None:
        if not ok(value):
            raise WrongValue(where, f"must be {what}, got {shown(value)}")
    return check


count = valid(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number ≥ 0")
text = valid(lambda v: isinstance(v, str) and bool(v.strip()), "non-empty text")
scoring = valid(lambda v: v in SCORINGS, " or ".join(SCORINGS))  # `unlabelled_test.scoring`


def items(value: object, where: str, length: int | None = None, why: str = "") -> list:
    """`value`, a list of `length` entries (any length: None)."""
    if not isinstance(value, list):
        raise WrongValue(where, f"must be a list, got {shown(value)}")
    if length is not None and len(value) != length:
        raise WrongValue(where, f"has {len(value)} {'entry' if len(value) == 1 else 'entries'}, not {length}: {why}")
    return value


def mapping(value: object, where: str, keys: tuple[str, ...] = ()) -> dict:
    """`value`, an object holding `keys`."""
    if not isinstance(value, dict):
        raise WrongValue(where, f"must be an object, got {shown(value)}")
    missing = [key for key in keys if key not in value]
    if missing:
        raise WrongValue(where, f"lacks {', '.join(repr(key) for key in missing)}")
    return value


def listed(length: int | None, why: str, entry: Callable[[int], Check]) -> Check:
    """The check of a list of `length` entries (any length: None), entry i checked by `entry(i)`."""
    def check(value: object, where: str) -> None:
        for i, found in enumerate(items(value, where, length, why)):
            entry(i)(found, f"{where}[{i}]")
    return check


def record(keys: tuple[str, ...], **checks: Check) -> Check:
    """The check of an object holding `keys`: each of `checks`, in their order, on the key it names, if held."""
    def check(value: object, where: str) -> None:
        found = mapping(value, where, keys)
        for key, inner in checks.items():
            if key in found:
                inner(found[key], f"{where}.{key}")
    return check


def or_null(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def numbers(value: object, where: str) -> None:
    """[number, ...] (a curve) or {name: number} (thresholds per group)."""
    entries = value.items() if isinstance(value, dict) else enumerate(items(value, where))
    for key, entry in entries:
        number()(entry, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")


def fractions(value: object, where: str) -> None:
    """{name: a fraction}: a sparsity per block or module."""
    for name, entry in mapping(value, where).items():
        fraction(entry, f"{where}.{name}")


def interval(low: float, high: float) -> Check:
    """The check of a [low, high] interval of a number in [`low`, `high`]."""
    end = number(low, high, f"an interval within [{low:g}, {high:g}]")

    def check(value: object, where: str) -> None:
        ends = items(value, where, 2, "an interval is [low, high]")
        for found in ends:
            end(found, where)
        if ends[0] > ends[1]:
            raise WrongValue(where, f"must be [low, high] with low ≤ high, got {shown(ends)}")
    return check


def beyond_diagonal(i: int, j: int) -> Check:
    """A matrix cell of task j after training i < j: null (task j is trained later)."""
    return valid(lambda v: v is None, f"null (task {j + 1} is trained after training {i + 1})")


def same_examples(sizes: dict[int, int], j: int) -> Check:
    """The check of a cell's flags of task j: of `jumplora.flags.pack`'s format, as many as task j's other cells
    (`sizes`)."""
    def check(cell: object, where: str) -> None:
        if not isinstance(cell, str):
            raise WrongValue(where, f"must be a cell's flags, text '<n>:<base64>', got {shown(cell)}")
        try:
            n = flags.count(cell)
        except ValueError as error:
            raise WrongValue(where, f"is not a cell's flags: {error}") from None
        if sizes.setdefault(j, n) != n:
            raise WrongValue(where, f"holds {n} flags, task {j + 1}'s other cells {sizes[j]}: a task's cells are "
                             "over the same examples")
    return check


@dataclass(frozen=True)
class Shape:
    """How long a run's lists are: one entry per task of `tasks` (the order's tasks it trained), one row per training
    (a task each; one for a joint method); `tasks` None: a file without tasks, which has no lists either."""

    tasks: list[str] | None
    joint: bool

    @property
    def size(self) -> int | None:
        return None if self.tasks is None else len(self.tasks)

    def per_task(self, check: Check) -> Check:
        return listed(self.size, PER_TASK, lambda j: check)

    def rows(self, row: Callable[[int], Check]) -> Check:
        """A row per training, row i checked by `row(i)`."""
        if self.joint:
            return listed(1, "one: a joint method trains once", row)
        return listed(self.size, "one per training, a task each of tasks", row)

    def per_training(self, check: Check) -> Check:
        return self.rows(lambda i: check)

    def matrix(self, cell: Check) -> Check:
        """A row per training, a cell per task: `cell` up to the diagonal (a joint method's one row: every cell), null
        beyond (task j is trained after training i)."""
        def row(i: int) -> Check:
            return listed(self.size, PER_TASK, lambda j: cell if self.joint or j <= i else beyond_diagonal(i, j))
        return self.rows(row)

    def flags(self, sizes: dict[int, int]) -> Check:
        """Test or dev flags: a row per training, a cell per task trained so far (a joint method's one row: every
        task), each task's cells over the same examples (`sizes`: per task, how many its cells hold)."""
        def row(i: int) -> Check:
            return listed(self.size if self.joint else i + 1, "a cell per task trained so far",
                          lambda j: same_examples(sizes, j))
        return self.rows(row)

    def counts(self, value: object, where: str) -> None:
        """{task: a count} of each task of `tasks`."""
        found = mapping(value, where)
        if sorted(found) != sorted(self.tasks):
            raise WrongValue(where, f"must count each task of tasks, got {shown(list(found))}")
        for task, rows in found.items():
            count(rows, f"{where}.{task}")


def options(value: object, where: str) -> None:
    """The recorded config (`RunConfig.to_dict`): each value that is an option's of its kind (`option_problem`); a
    key RunConfig has not (a method's settings, a field since removed) is left as it is."""
    for name, found in mapping(value, where).items():
        problem = option_problem(OPTIONS[name], found) if name in OPTIONS else None
        if problem is not None:
            raise WrongValue(f"{where}.{name}", f"{problem}, got {shown(found)}")


def field_checks(shape: Shape) -> dict[str, Check]:
    """The check of each field holding a list or an object, in the order `check_content` checks them."""
    test: dict[int, int] = {}  # per task, how many test examples its cells hold (the a0 rows' too)
    a0_flags = listed(shape.size, PER_TASK, lambda j: same_examples(test, j))
    return {
        "accuracy_matrix": shape.matrix(accuracy), "dev_accuracy_matrix": shape.matrix(accuracy),
        "test_flags": shape.flags(test), "dev_flags": shape.flags({}),
        "single_task_flags": a0_flags, "single_task_flags_shared": a0_flags,
        **dict.fromkeys(("single_task_accuracy", "single_task_accuracy_shared", "majority_baseline"),
                        shape.per_task(accuracy)),
        "test_fingerprints": shape.per_task(text), "lambdas": shape.per_task(number(0, what="a λ ≥ 0")),
        "unlabelled_test": record(("scoring", "rows", "labelled_rows"), scoring=scoring, rows=shape.counts,
                                  labelled_rows=shape.counts),
        "sparsity": shape.per_training(record(("overall", "per_layer"), overall=fraction, per_layer=fractions,
                                              per_module=fractions)),
        "thresholds": shape.per_training(lambda value, where: numbers(mapping(value, where), where)),
        "loss_curves": record(("ce", "penalty"), ce=shape.per_training(numbers), penalty=shape.per_training(numbers)),
        "jaccard": record(("matrix", "middle_block", "mean_with_earlier_middle_block"), middle_block=text,
                          matrix=shape.per_training(shape.per_training(fraction)),
                          mean_with_earlier_middle_block=shape.per_training(or_null(fraction))),
        "cost": record(COST_KEYS, **dict.fromkeys(("trainings", "optimizer_steps", "devices"), count),
                       wall_seconds=at_least_0, device_hours=at_least_0, device_unit=text,
                       task_seconds=shape.per_training(at_least_0)),
        # `uncertainty.RunIntervals.to_json`: each metric's [low, high] in its range, each cell's null or in [0, 1]
        "intervals": record((), confidence=number(0, 1, "a probability"), cell_method=text, metric_method=text,
                            **{name: interval(low, high) for name, (low, high) in PERCENT.items()},
                            **dict.fromkeys(("accuracy_matrix", "dev_accuracy_matrix"),
                                            shape.matrix(or_null(interval(0, 1))))),
        "config": options,
    }


def check_size(data: dict) -> None:
    """Every number of a size a run writes: a float within float32's range (the tensors every value comes from),
    an int within int64's."""
    where = first_number(data, lambda x: abs(x) > (INT_LIMIT if isinstance(x, int) else FLOAT_LIMIT))
    if where is not None:
        raise WrongValue(where, f"is larger than a run writes (float32 holds at most {FLOAT_LIMIT:.3g})")


def check_content(results: RunResults) -> None:
    """Raise WrongValue at the first value of `results` that no run writes (`from_json` has checked the types of its
    top-level values): its identity, its metrics, then each field of `field_checks` that is not null."""
    shape = Shape(results.tasks, results.joint)
    check_identity(results)
    check_metrics(results)
    for name, check in field_checks(shape).items():
        if getattr(results, name) is not None:
            check(getattr(results, name), name)


def check_identity(results: RunResults) -> None:
    for name, kind in (("order", POSITIVE_INT), ("seed", SEED)):
        problem = kind.problem(getattr(results, name))
        if problem is not None:
            raise WrongValue(name, f"{problem}, got {getattr(results, name)}")
    text(results.method, "method")
    if results.tasks is None:
        found = next((name for name in LISTED if getattr(results, name) is not None), None)
        if found is not None:
            raise WrongValue("tasks", f"is null or missing, but {found} is listed per task of it")
        return
    if not results.tasks:
        raise WrongValue("tasks", "is empty: a run trains at least one task")
    for j, task in enumerate(results.tasks):
        text(task, f"tasks[{j}]")


def check_metrics(results: RunResults) -> None:
    """Each metric in its range; a joint method's run has OA only, a continual run a BWT (null: a joint method's)."""
    for name, (low, high) in PERCENT.items():
        value = getattr(results, name)
        if value is None:
            if name == "bwt" and not results.joint:
                raise WrongValue("bwt", f"is null, but {results.method} is a continual method, whose runs record "
                                 "their BWT (null is a joint method's, as MTL's)")
        elif results.joint and name != "oa":
            raise WrongValue(name, f"must be null: {results.method} trains once on all tasks (a joint method), so "
                             f"its runs have no {name}; got {shown(value)}")
        else:
            number(low, high, f"a percentage in [{low}, {high}]")(value, name)


def read_json(path: Path) -> object:
    """The JSON value of `path`; a JumpLoRAError naming it when it cannot be read or parsed."""
    try:
        return parse_json(Path(path).read_bytes(), str(path))
    except OSError as error:
        raise JumpLoRAError(f"{path} is not readable JSON ({error})") from None


def parse_json(content: bytes, source: str) -> object:
    """The JSON value of a file's `content`; a JumpLoRAError naming `source` when it is not JSON (nor UTF-8)."""
    try:
        return json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise JumpLoRAError(f"{source} is not readable JSON ({error})") from None


def read_results(path: Path, needs: Needs | None = None) -> RunResults:
    """The `RunResults` of a `results.json` file (`RunResults.from_json`, errors naming the file)."""
    return RunResults.from_json(read_json(path), str(path), needs)


# ---------------------------------------------------------------- a λ grid's manifest

OPTIONAL_KEYS = ("steps", "rung_dev", "dev_flags", "seed")  # a trial's keys written only when not None
CUT_KEYS = ("cut_at_step", "rung_dev_mean", "rung_dev_past", "rung_dev_current")  # a trial's written only when cut
STAGE_OPTIONAL_KEYS = ("search", "work", "cost", "rung_steps", "seeds", "checkpoints")  # a stage's, when not None


@dataclass
class TrialRecord:
    """A λ trial of a grid stage (`ray_jobs.grid.candidate`): its dev mean and parts at the end of the task (None when
    a search cut it: then its last rung's, on the rung subset), its test mean (if tested), its checkpoint, the
    optimizer steps it ran, its rungs' dev means and, when cut, where; and the right / wrong flags of the dev examples
    of each seen task at the end of the task (`jumplora.flags`, packed cells; None: cut by a search, or recorded
    before flags were kept), from which `jumplora.selection` gets its standard errors. The fields are in the order
    the grid writes them."""

    lam: float
    dev_mean: float | None
    dev_past: float | None = None
    dev_current: float | None = None
    test_mean: float | None = None
    checkpoint: str | None = None
    steps: int | None = None  # None: recorded before steps were counted
    rung_dev: list[float] | None = None  # a search's rung means (None: a grid)
    dev_flags: list[str] | None = None
    cut_at_step: int | None = None  # None: trained to the end of the task; else the rung fields below
    rung_dev_mean: float | None = None
    rung_dev_past: float | None = None
    rung_dev_current: float | None = None
    selected: bool = False
    seed: int | None = None  # the seed it trained with, in a grid of several (`--seeds`); None: a grid of one

    def to_json(self) -> dict:
        """The manifest's entry: the keys a trial has (those of `OPTIONAL_KEYS` when not None, those of `CUT_KEYS`
        when cut)."""
        cut = self.cut_at_step is not None
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if (cut if f.name in CUT_KEYS else f.name not in OPTIONAL_KEYS or getattr(self, f.name) is not None)}

    @classmethod
    def from_json(cls, data: dict) -> TrialRecord:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclass(kw_only=True)
class StageRecord:
    """A finished stage of a λ grid (`ray_jobs.grid.run_stage`), as `manifest.json` keeps it: task `task` (1-based)
    trained with each λ of `trials`, the chosen λ and the checkpoint the next stage starts from (the chosen trial's,
    with its test row), the single-task baselines trained beside it (stage 1: {"task", "a0", "a0_flags", "seconds",
    "steps"}; a0_flags missing: recorded before they were kept), its wall seconds, and, for stages recorded since they
    were kept, the search, what its trials ran (`jobs.Work`), what they cost (`grid.trials_cost`) and a halving
    search's rung steps. A grid of several seeds (`--seeds`) records them in `seeds`, each trial and baseline its seed
    (each seed's chosen trial `selected`) and `checkpoints` each seed's start of the next stage (`checkpoint` None); a
    grid of one seed writes neither."""

    task: int
    task_name: str
    selected_lam: float
    checkpoint: str | None = None
    trials: list[TrialRecord]  # by λ
    baselines: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    search: str | None = None  # "grid" or "halving"; None: recorded before searches (a grid)
    work: dict | None = None
    cost: dict | None = None
    rung_steps: list[int] | None = None
    seeds: list[int] | None = None
    checkpoints: list[str] | None = None  # with `seeds`: each seed's start of the next stage, in their order

    @property
    def chosen(self) -> TrialRecord:
        """The chosen trial (the first seed's, in a grid of several)."""
        return next(trial for trial in self.trials if trial.selected)

    def start(self, seed: int | None = None) -> str | None:
        """The checkpoint the next stage of `seed` starts from (`checkpoint` in a grid of one seed)."""
        return self.checkpoint if self.seeds is None else self.checkpoints[self.seeds.index(seed)]

    def to_json(self) -> dict:
        """The manifest's entry: the fields in their order, those of `STAGE_OPTIONAL_KEYS` when not None."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in STAGE_OPTIONAL_KEYS or getattr(self, f.name) is not None}
        return {**data, "trials": [trial.to_json() for trial in self.trials]}

    @classmethod
    def from_json(cls, data: dict) -> StageRecord:
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        return cls(**{**values, "trials": [TrialRecord.from_json(trial) for trial in data["trials"]]})


def read_manifest(data: object, source: str) -> tuple[dict, list[StageRecord]]:
    """A grid's `manifest.json` as data: its job ({"run": a RunConfig's dict, "lambdas_tried", ...}) and its stages;
    a JumpLoRAError naming `source` when it is not one this package wrote (a key missing, a value of the wrong type,
    a number that is not finite), so that nothing is logged or resumed from it."""
    try:
        job, stages = data["job"], [StageRecord.from_json(record) for record in data["stages"]]
        if not isinstance(job["run"], dict) or not isinstance(job["lambdas_tried"], list) or \
                not all(isinstance(stage.trials, list) and stage.trials for stage in stages):
            raise TypeError("a job or stage of the wrong shape")
    except (KeyError, TypeError, AttributeError) as error:
        raise JumpLoRAError(f"{source} is not a grid manifest this jumplora reads ({type(error).__name__}: {error}): "
                            "read it with the jumplora version that wrote it, or pass another --name") from None
    where = first_non_finite([stage.to_json() for stage in stages])
    if where is not None:
        raise JumpLoRAError(f"{source} holds a number that is not finite (stages{where}): its grid diverged")
    return job, stages


def first_non_finite(value, where: str = "") -> str | None:
    """Where the JSON value holds NaN or an infinity first (`key[i].key = nan`), or None."""
    return first_number(value, lambda x: isinstance(x, float) and not math.isfinite(x), where)


def first_number(value, bad: Callable[[int | float], bool], where: str = "") -> str | None:
    """Where the JSON value holds a number that is `bad` first (`key[i].key = 1e+308`), or None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and bad(value):
        return f"{where or 'the value'} = {value}"
    entries = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, entry in entries:
        found = first_number(entry, bad, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None
