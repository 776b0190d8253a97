"""The typed results that cross file and process boundaries: `RunResults`, what a run directory's `results.json`
holds (`jumplora.continual.summarise` makes it, `jumplora.outputs.write_run` writes it, the report, the plots and
MLflow read it), and `StageRecord` / `TrialRecord`, a λ grid's stage entry in its `manifest.json`
(`ray_jobs.grid`). Each has `to_json` / `from_json`; the JSON layout is the files' own, so files written before these
types existed read as they are. Standard library only: a reader of results needs neither torch nor transformers.

`results.json` carries a `schema` version (`SCHEMA`); a file without one was written before the field existed and
reads as schema 1. A reader refuses any other version with one line."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from jumplora.errors import JumpLoRAError

SCHEMA = 1  # the layout of results.json this package writes and reads

NUMBER = (int, float)
# results.json's top-level keys, in the order they are written, with the JSON type of each value; every value but
# those of `REQUIRED` may be null or absent (a file written before it was recorded)
KINDS: dict[str, tuple[type, ...]] = {
    "order": (int,), "tasks": (list,), "method": (str,), "config": (dict,), "seed": (int,),
    "data_fingerprint": (str,), "accuracy_matrix": (list,), "dev_accuracy_matrix": (list,),
    "single_task_accuracy": (list,), "single_task_accuracy_shared": (list,), "unlabelled_test": (dict,),
    "majority_baseline": (list,), "oa": NUMBER, "la": NUMBER, "bwt": NUMBER, "fwt": NUMBER, "fwt_last_row": NUMBER,
    "intervals": (dict,), "sparsity": (list,), "jaccard": (dict,), "thresholds": (list,), "lambdas": (list,),
    "loss_curves": (dict,), "runtime": (dict,), "cost": (dict,), "test_flags": (list,), "dev_flags": (list,),
    "single_task_flags": (list,), "single_task_flags_shared": (list,), "test_fingerprints": (list,),
}
REQUIRED = ("method", "order", "seed", "oa", "bwt")  # present in every results.json ever written (bwt null: MTL)
NOT_NULL = ("method", "order", "seed", "oa")
KIND_NAMES = {int: "an integer", str: "a string", dict: "an object", list: "a list", float: "a number"}


@dataclass(kw_only=True)
class RunResults:
    """One continual run's outcome (`continual.summarise`): accuracies in [0, 1], OA / LA / BWT / FWT / FWT last row
    in percent (SPEC §4; LA the learning accuracy, the mean of the diagonal; LA, BWT and FWT None for a joint method,
    MTL; FWT None without single-task baselines). The nested
    values stay the JSON objects they are written as (see `summarise` for their keys)."""

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
        """A joint method's run (MTL: one training on the union of the order's tasks, one row): the only kind whose
        BWT is null, so a reader needs no method registry (nor the method's plugin) to tell."""
        return self.bwt is None

    def unlabelled_rows(self) -> dict[str, tuple[int, int]]:
        """{task: (test rows labelled outside the options, labelled rows)} of the tasks that have any (MNLI's "-");
        {} for a run written before they were counted."""
        info = self.unlabelled_test or {}
        return {task: (rows, info["labelled_rows"][task]) for task, rows in (info.get("rows") or {}).items() if rows}

    def to_json(self) -> dict:
        """The `results.json` object: `schema` first, then every key in the order `KINDS` lists."""
        return {"schema": self.schema, **{name: getattr(self, name) for name in KINDS}}

    @classmethod
    def from_json(cls, data: object, source: str = "results.json") -> RunResults:
        """The results of a `results.json` object; a JumpLoRAError naming `source` when it is not one of this
        schema: not an object, a required key missing, a value of the wrong type. Unknown keys are left out."""
        if not isinstance(data, dict):
            raise JumpLoRAError(f"{source} does not hold a JSON object")
        check_schema(data.get("schema", 1), source)
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise JumpLoRAError(f"{source} lacks {', '.join(repr(key) for key in missing)}")
        for name, kinds in KINDS.items():
            value = data.get(name)
            if value is None and name not in NOT_NULL:
                continue
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise JumpLoRAError(f"{source} holds a value of the wrong type ({name} must be {KIND_NAMES[kinds[-1]]}"
                                    f", got {json.dumps(value)[:40]})")
        return cls(**{name: data[name] for name in KINDS if name in data})


def check_schema(schema: object, source: str) -> None:
    if schema != SCHEMA or isinstance(schema, bool):
        raise JumpLoRAError(f"{source} has schema {json.dumps(schema)}; this jumplora reads schema {SCHEMA}: read it "
                            "with the jumplora version that wrote it (upgrade jumplora)")


def read_json(path: Path) -> object:
    """The JSON value of `path`; a JumpLoRAError naming it when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise JumpLoRAError(f"{path} is not readable JSON ({error})") from None


def read_results(path: Path) -> RunResults:
    """The `RunResults` of a `results.json` file (`RunResults.from_json`, errors naming the file)."""
    return RunResults.from_json(read_json(path), str(path))


# ---------------------------------------------------------------- a λ grid's manifest


@dataclass
class TrialRecord:
    """A λ trial of a grid stage (`ray_jobs.grid.candidate`): its dev mean and parts at the end of the task (None when
    a search cut it: then its last rung's, on the rung subset), its test mean (if tested), its checkpoint, the
    optimizer steps it ran, its rungs' dev means and, when cut, where; and the right / wrong flags of the dev examples
    of each seen task at the end of the task (`jumplora.flags`, packed cells; None: cut by a search, or recorded
    before flags were kept), from which `jumplora.selection` gets its standard errors."""

    lam: float
    dev_mean: float | None
    dev_past: float | None = None
    dev_current: float | None = None
    dev_flags: list[str] | None = None
    test_mean: float | None = None
    checkpoint: str | None = None
    steps: int | None = None  # None: recorded before steps were counted
    rung_dev: list[float] | None = None  # a search's rung means (None: a grid)
    cut_at_step: int | None = None  # None: trained to the end of the task; else the four rung fields below
    rung_dev_mean: float | None = None
    rung_dev_past: float | None = None
    rung_dev_current: float | None = None
    selected: bool = False

    def to_json(self) -> dict:
        """The manifest's entry: the keys a trial has, in the order the grid writes them."""
        data = {"lam": self.lam, "dev_mean": self.dev_mean, "dev_past": self.dev_past,
                "dev_current": self.dev_current, "test_mean": self.test_mean, "checkpoint": self.checkpoint}
        if self.steps is not None:
            data["steps"] = self.steps
        if self.rung_dev is not None:
            data["rung_dev"] = self.rung_dev
        if self.dev_flags is not None:
            data["dev_flags"] = self.dev_flags
        if self.cut_at_step is not None:
            data.update(cut_at_step=self.cut_at_step, rung_dev_mean=self.rung_dev_mean,
                        rung_dev_past=self.rung_dev_past, rung_dev_current=self.rung_dev_current)
        data["selected"] = self.selected
        return data

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
    search's rung steps."""

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

    @property
    def chosen(self) -> TrialRecord:
        return next(trial for trial in self.trials if trial.selected)

    def to_json(self) -> dict:
        data = {"task": self.task, "task_name": self.task_name, "selected_lam": self.selected_lam,
                "checkpoint": self.checkpoint, "trials": [trial.to_json() for trial in self.trials],
                "baselines": self.baselines, "seconds": self.seconds}
        for name in ("search", "work", "cost", "rung_steps"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

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
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the value'} = {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = first_non_finite(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None
