"""The runs a report reads (`collect`): each `results.json` found under a folder or in an MLflow experiment, read as
a `RunResult` on the authors' scoring (`authors_scored`), repeats of one configuration and seed kept once (`latest`)
and every run labelled by its row of the tables (`labelled`)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from jumplora import metrics, tables, uncertainty
from jumplora.config import RunConfig
from jumplora.data.orders import order_tasks
from jumplora.data.tasks import PAPER_ORDERS
from jumplora.errors import JumpLoRAError
from jumplora.methods.registry import label
from jumplora.outputs import RESULTS
from jumplora.results import Needs, RunResults, read_results

PARTIAL = " [first "  # in the label of a run cut by --max-tasks (`partial_label`)


@dataclass(frozen=True)
class RunResult:
    label: str  # its row: the method, its threshold / ELLA delta when not the default (`method_label`, `labelled`)
    order: int
    seed: int
    oa: float
    bwt: float | None  # None: MTL (one training on all tasks, no BWT)
    fwt: float | None
    results: RunResults
    source: str
    fwt_last_row: float | None = None  # the authors' script's FWT, compared with the paper's (SPEC §4)
    flags: uncertainty.RunFlags | None = None  # its test flags on the authors' scoring; None: written before kept
    finished: float | None = None  # when it finished (seconds since the epoch): results.json written, MLflow's end

    def table_values(self) -> dict[str, float | None]:
        """What the paper-comparison tables read: the authors' scoring of the run (`authors_scored`), else as above."""
        recorded = {"oa": self.oa, "bwt": self.bwt, "fwt": self.fwt, "fwt_last_row": self.fwt_last_row}
        return authors_scored(self.results) or recorded


def method_label(results: RunResults, settings_shown: tuple[str, ...] = ()) -> str:
    """The method as the registry names it (`registry.label`: its named choices away from their defaults), with
    `settings_shown` (`labelled`: the settings that tell its row from another of the method) in the same brackets,
    then `partial_label`."""
    named = label(results.method, results.config or {})
    if settings_shown:
        shown = ", ".join(settings_shown)
        named = f"{named[:-1]}, {shown})" if named.endswith(")") else f"{named} ({shown})"
    return named + partial_label(results)


def last_row_fwt(results: RunResults, fwt_last_row: float | None = None) -> float | None:
    """The run's `fwt_last_row`; else the given one (an MLflow metric); else computed from its matrix and a0 for a run
    written before it was recorded (one with an FWT; it has one a0 row, its own adapter's); else None."""
    if results.fwt_last_row is not None:
        return results.fwt_last_row
    if fwt_last_row is not None:
        return fwt_last_row
    a0, matrix = results.single_task_accuracy, results.accuracy_matrix
    if results.fwt is not None and a0 is not None and matrix is not None:
        return metrics.forward_transfer_last_row(matrix, a0)
    return None


def unlabelled_factors(results: RunResults) -> list[float] | None:
    """Per task of the order, the factor that turns the run's accuracies into the authors' scoring, where its test rows
    labelled outside the options count as wrong (`metrics.authors_factor`); None when nothing changes: the run scored
    them so already (`--authors-compat`), its tasks have none, or it was written before they were counted."""
    info = results.unlabelled_test
    if not results.unlabelled_rows() or info["scoring"] != "dropped":
        return None
    return [metrics.authors_factor(info["labelled_rows"][task], info["rows"][task]) for task in results.tasks]


def transfer_values(results: RunResults, a0: list[float] | None, shared_a0: list[float] | None) -> dict:
    """OA, BWT, FWT (against `a0`, the run's own adapter kind) and FWT last row (against `shared_a0`, plain LoRA) from
    the run's matrix and the given a0 rows, every accuracy on the authors' scoring (`unlabelled_factors`). MTL (no
    BWT): OA only."""
    factors = unlabelled_factors(results) or [1.0] * len(results.tasks)

    def scaled(row):
        return None if row is None else [None if v is None else v * f for v, f in zip(row, factors, strict=True)]

    matrix = [scaled(row) for row in results.accuracy_matrix]
    if results.joint:  # MTL: one training, one row
        return {"oa": metrics.joint_overall_accuracy(matrix[0]), "bwt": None, "fwt": None, "fwt_last_row": None}
    return {"oa": metrics.overall_accuracy(matrix), "bwt": metrics.backward_transfer(matrix),
            "fwt": None if a0 is None else metrics.forward_transfer(matrix, scaled(a0)),
            "fwt_last_row": None if shared_a0 is None
            else metrics.forward_transfer_last_row(matrix, scaled(shared_a0))}


def authors_scored(results: RunResults) -> dict | None:
    """The run's OA / BWT / FWT / FWT last row on the authors' scoring, from its matrix and both a0 rows; None when
    its recorded numbers are that already (`unlabelled_factors`)."""
    if unlabelled_factors(results) is None:
        return None
    return transfer_values(results, results.single_task_accuracy, results.single_task_accuracy_shared)


def read_run(path: Path, source: str, fwt: float | None = None, fwt_last_row: float | None = None,
             finished: float | None = None, needs: Needs | None = None) -> RunResult:
    """The run of one `results.json`; a JumpLoRAError naming the file, the field and what is wrong with it otherwise
    (not JSON, not of this schema, a value no run writes, a field `needs` lacks: `results.read_results`, the one
    schema every reader reads it with). `fwt`, `fwt_last_row`: an MLflow run's metrics, for a file without them.
    `finished`: when the run finished; by default the file's modification time (a run writes results.json last, once,
    when it finishes)."""
    results = read_results(path, needs)
    bwt = None if results.bwt is None else float(results.bwt)  # None: MTL
    return RunResult(method_label(results), results.order, results.seed, float(results.oa), bwt,
                     results.fwt if results.fwt is not None else fwt, results, source,
                     last_row_fwt(results, fwt_last_row),
                     uncertainty.RunFlags.of(results, unlabelled_factors(results)),
                     path.stat().st_mtime if finished is None else finished)


def partial_label(results: RunResults) -> str:
    """`[first n of N tasks]` (after a space) for a run cut by --max-tasks before the end of its order, else "": its
    numbers are not those of the order (nor the paper's), so it gets rows of its own and no paper number beside
    them."""
    config = results.config or {}
    cut, tasks = config.get("max_tasks"), results.tasks or []
    if cut is None:
        return ""
    try:
        length = len(order_tasks(config.get("data_dir"), results.order))
    except (JumpLoRAError, OSError, ValueError, TypeError):
        length = len(PAPER_ORDERS.get(results.order, ()))
    return f"{PARTIAL}{len(tasks)} of {length} tasks]" if len(tasks) < length else ""


def skip_damaged(path: Path, source: str, fwt: float | None = None, fwt_last_row: float | None = None,
                 finished: float | None = None) -> RunResult | None:
    """`read_run`, or None after one warning line when the file is damaged (found while searching)."""
    try:
        return read_run(path, source, fwt, fwt_last_row, finished)
    except JumpLoRAError as error:
        print(f"warning: skipped {error}", file=sys.stderr)
        return None


def from_experiment(name: str, tracking_uri: str | None) -> list[RunResult]:
    """The continual runs (and grids) of an MLflow experiment, from their `results.json` artifacts; each finished
    when MLflow says it ended (a downloaded file's time is the download's)."""
    from jumplora import tracking
    from jumplora.tracking.store import MissingStore

    try:  # before MLflow loads: a store that is not there is said at once, and not created
        uri = tracking.open_store(tracking.resolve_uri(tracking_uri))
    except MissingStore as error:
        raise JumpLoRAError(f"{name!r} is neither a run directory nor an MLflow experiment: {error}") from None
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        raise JumpLoRAError(f"{name!r} is neither a run directory nor an MLflow experiment of {client.tracking_uri}")
    found = []
    runs = client.search_runs([experiment.experiment_id], filter_string="attributes.status = 'FINISHED'",
                              run_view_type=ViewType.ACTIVE_ONLY, max_results=5000)
    with tempfile.TemporaryDirectory() as scratch:
        for run in runs:
            if run.data.tags.get(tracking.KIND_TAG) not in ("run", "grid"):
                continue
            try:
                path = client.download_artifacts(run.info.run_id, RESULTS, dst_path=f"{scratch}/{run.info.run_id}")
            except Exception:  # noqa: BLE001 - a run without results.json is skipped
                continue
            ended = None if run.info.end_time is None else run.info.end_time / 1000
            found.append(skip_damaged(Path(path), f"{name}/{run.info.run_name}", run.data.metrics.get("FWT"),
                                      run.data.metrics.get("FWT_last_row"), ended))
    return [run for run in found if run is not None]


def collect(sources: list[str], tracking_uri: str | None = None) -> list[RunResult]:
    """The runs of every source, a configuration run twice with one seed kept once (`latest`), each labelled by its
    row (`labelled`)."""
    runs: list[RunResult] = []
    for source in sources:
        path = Path(source)
        direct = path if path.is_file() else path / RESULTS
        if direct.is_file():  # named directly: a damaged file is an error
            try:
                found = [read_run(direct, str(direct.parent))]
            except JumpLoRAError as error:
                raise JumpLoRAError(f"{error}: fix the file or leave its run out of the sources") from None
        elif path.exists():
            files = sorted(p for p in path.rglob(RESULTS) if p.is_file())
            if not files:
                raise JumpLoRAError(f"{source} holds no {RESULTS}")
            found = [run for run in (skip_damaged(f, str(f.parent)) for f in files) if run is not None]
            if not found:
                raise JumpLoRAError(f"{source} holds no usable {RESULTS} ({len(files)} damaged, see the warnings)")
        else:
            found = from_experiment(source, tracking_uri)
        runs += found
    if not runs:
        raise JumpLoRAError("no runs found")
    return labelled(latest(runs))


REFERENCE = "inclora"  # plain LoRA: what the comparisons are against when it is among the methods


def comparison_notes(summary: dict) -> list[str]:
    """Why a method is left out of a report's comparisons (`summary.comparisons` pairs each method's runs with the
    reference method's of the same order and seed, on the same test examples): one sentence per method left out, so
    that a missing section (or row) is never silent; [] with one method. From the summary (`summary.aggregate`): its
    methods in order, its comparisons, its runs as recorded (a run without intervals kept no test flags)."""
    methods, compared = summary["methods"], {entry["method"] for entry in summary["comparisons"]}
    reference = REFERENCE if REFERENCE in methods else methods[0]
    theirs = {(run["order"], run["seed"]): run for run in summary["runs"] if run["method"] == reference}
    notes = []
    for method in (m for m in methods if m != reference and m not in compared):
        mine = [(run, theirs.get((run["order"], run["seed"]))) for run in summary["runs"] if run["method"] == method]
        same = [(run, other) for run, other in mine if other is not None]
        if not same:
            shown = ", ".join(f"order {run['order']} seed {run['seed']}" for run, _ in mine)
            why = (f"no run of it has the order and seed of a run of {reference} (its: {shown}): run both with the "
                   "same --order and --seed")
        elif all(run["intervals"] is None or other["intervals"] is None for run, other in same):
            why = (f"its runs or {reference}'s of the same order and seed keep no test flags (written before they "
                   "were kept): run them again to compare")
        else:
            why = (f"its runs and {reference}'s of the same order and seed were not tested on the same examples "
                   "(other data or caps): run both on the same data with the same --max-eval-per-task")
        notes.append(f"{method} is not compared with {reference}: {why}")
    return notes


# what repeats of one configuration may differ in: the seed (what repeats vary) and the device (where a run ran, not
# what it computes: a run's MLflow key leaves it out too)
NOT_SETTINGS = ("seed", "device")


@functools.cache
def config_defaults() -> dict[str, object]:
    """Every field of a run's config at its default (`settings` reads it for each run it compares)."""
    return RunConfig().to_dict()


def settings(results: RunResults) -> dict[str, object]:
    """The run's whole configuration as the report compares runs: every field of its recorded config
    (`RunConfig.to_dict`; a field an older run did not record yet, at its default) but `NOT_SETTINGS`, the method's
    own settings by their names (recorded under the method's name; an older run's flat), λ as the run resolved them,
    its method and order (all a run without a config has)."""
    found: dict[str, object] = {}
    recorded = {**config_defaults(), **results.config} if results.config else {}
    for name, value in recorded.items():
        if isinstance(value, dict):
            found.update(value)
        elif name not in NOT_SETTINGS:
            found[name] = value
    found.update(method=results.method, order=results.order)
    if results.lambdas is not None:
        found["lambdas"] = results.lambdas
    return found


def finished_text(run: RunResult) -> str:
    return "at an unknown time" if run.finished is None else \
        datetime.fromtimestamp(run.finished, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def latest(runs: list[RunResult]) -> list[RunResult]:
    """The runs, of each configuration (`settings`) and seed the one that finished latest (a run and its MLflow copy,
    a rerun), with a warning line naming both and the one kept (none for one source named twice)."""
    kept: dict[str, RunResult] = {}
    for run in runs:
        key = json.dumps([settings(run.results), run.seed], sort_keys=True, default=str)
        other = kept.setdefault(key, run)
        if other is run:
            continue
        newer, older = sorted((other, run), key=lambda r: -math.inf if r.finished is None else r.finished)[::-1]
        kept[key] = newer
        if newer.source == older.source:
            continue
        print(f"warning: {older.source} and {newer.source} hold the same run ({run.label}, order {run.order}, seed "
              f"{run.seed}, every setting equal); the one that finished later is used: {newer.source} (finished "
              f"{finished_text(newer)}; the other {finished_text(older)})", file=sys.stderr)
    return list(kept.values())


def labelled(runs: list[RunResult]) -> list[RunResult]:
    """Each run labelled by its row of the tables. Runs of one `method_label` whose settings (`settings`, but the
    order and λ) differ are rows of their own, each labelled by the settings that differ (`inclora (lr 0.002)`);
    runs of one such row that differ in λ at an order (λ differ between orders by design: the paper's tables) are
    rows of their own too, labelled by their λ (`jumplora+ella (λ 0,10000)`)."""
    rows: dict[str, dict[str, list[RunResult]]] = {}
    for run in runs:
        shared = {k: v for k, v in settings(run.results).items() if k not in ("order", "lambdas")}
        rows.setdefault(run.label, {}).setdefault(json.dumps(shared, sort_keys=True, default=str), []).append(run)
    found = []
    for members in rows.values():
        configs = {key: json.loads(key) for key in members}
        names = sorted({name for config in configs.values() for name in config})
        differ = [name for name in names if len({json.dumps(c.get(name)) for c in configs.values()}) > 1]
        for key, row in members.items():
            shown = tuple(f"{name} {setting_text(configs[key].get(name))}" for name in differ)
            by_lambda = len({(r.order, json.dumps(r.results.lambdas)) for r in row}) > len({r.order for r in row})
            for run in row:
                words = shown + ((f"λ {setting_text(run.results.lambdas)}",) if by_lambda else ())
                found.append(dataclasses.replace(run, label=method_label(run.results, words)) if words else run)
    return found


def setting_text(value: object) -> str:
    """A setting's value in a row's label: numbers as short as they stay exact, a list comma-separated, `–` for
    none."""
    if isinstance(value, list):
        return ",".join(setting_text(v) for v in value)
    if value is None:
        return tables.NO_VALUE
    if isinstance(value, float):
        return f"{value:g}" if float(f"{value:g}") == value else repr(value)
    return str(value)
