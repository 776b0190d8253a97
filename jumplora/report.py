"""`jumplora report`: runs → the paper's tables (OA by method × order; BWT / FWT by benchmark), each cell the mean ±
sample std (ddof = 1) over seeds, beside the paper's numbers (search_spaces/paper_results.yaml, SPEC §6); written
as Markdown, JSON and an HTML page with the plots. FWT comes twice (SPEC §4): SPEC's `fwt`, mean_j (a[j][j] − a0[j]),
and `fwt_last_row`, mean_j (a[T][j] − a0[j]) as the authors' evaluation script computes it; the paper's FWT column
matches the latter, so its numbers stand beside `fwt_last_row`.

Every method of the registry has its rows, in the paper's order (search_spaces/methods.yaml): the paper's four,
then the reference baselines (SPEC §7), whose paper number, where there is one (EWC's OA), stands beside ours as well.
MTL trains once on the union of the order's tasks: its results.json has no BWT or FWT (null), printed as `–`.

The tables compare with the paper, so they score every run as the authors' script does: test rows labelled outside
the options (MNLI's "-") count as wrong (SPEC §4). A run that dropped them (no `--authors-compat`) is rescaled from
its matrix and a0 rows (`authors_scored`); the Runs list shows each run as recorded, with its scoring. A third table
shows what each method's runs cost (trainings, optimizer steps, wall and device hours; `jumplora.cost`).

Runs are run directories (a `results.json`, or a folder searched for them, e.g. a sweep's storage folder) or the
names of MLflow experiments (`jumplora-order1`), whose continual runs' `results.json` artifacts are read.

A row of the tables is one configuration: runs are repeats (a cell's seeds) only when their whole configuration but
the seed is equal (`settings`: λ, caps, the method's own settings, the model, ...); runs of one method that differ
in other settings are rows of their own, labelled by the settings that differ (`labelled`). Of two runs of the same
configuration and seed, the one that finished later is kept, whatever the source (`latest`), and a warning says
which.

A damaged `results.json` (not JSON, truncated, of another schema, missing a key such as "method", a value of the
wrong type: `results.read_results`) found while searching a folder or an experiment is skipped with one warning line
naming it and what is wrong; one named directly (the file, or the run directory holding it) is an error, and so is a
source where nothing usable is left."""

from __future__ import annotations

import base64
import dataclasses
import functools
import html
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from jumplora import metrics, ownership, spaces, tables, uncertainty
from jumplora.config import RunConfig
from jumplora.data.orders import order_tasks
from jumplora.data.tasks import BENCHMARK_ORDERS, PAPER_ORDERS
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS
from jumplora.outputs import RESULTS, atomic_write_text
from jumplora.results import RunResults, first_non_finite, read_results

REPORT_MD, REPORT_HTML, REPORT_JSON = "report.md", "report.html", "report.json"
OA_BARS = "oa_by_method.png"
PARTIAL = " [first "  # in the label of a run cut by --max-tasks (`partial_label`)
TRANSFER_HEADINGS = {"bwt": "BWT", "fwt": "FWT", "fwt_last_row": "FWT last row"}
FWT_NOTE = ("FWT = mean_j (a[j][j] − a0[j]) (SPEC §4), a0 = the method's own adapter trained on each task alone; "
            "FWT last row = mean_j (a[T][j] − a0[j]), the authors' evaluation script's formula, with a0 = plain LoRA "
            "trained on each task alone, one a0 shared by every method as in the paper: the paper's FWT is shown "
            "beside FWT last row.")


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
    paper: dict | None = None  # oa, bwt, fwt, fwt_last_row on the authors' scoring (`authors_scored`); None: as above
    flags: uncertainty.RunFlags | None = None  # its test flags on the authors' scoring; None: written before kept
    finished: float | None = None  # when it finished (seconds since the epoch): results.json written, MLflow's end

    def table_values(self) -> dict[str, float | None]:
        """What the paper-comparison tables read: the authors' scoring of the run."""
        recorded = {"oa": self.oa, "bwt": self.bwt, "fwt": self.fwt, "fwt_last_row": self.fwt_last_row}
        return self.paper or recorded


def method_label(results: RunResults, settings_shown: tuple[str, ...] = ()) -> str:
    """The method, with its threshold / ELLA delta when not the default and `settings_shown` (`labelled`: the settings
    that tell its row from another of the method), then `partial_label`."""
    config = results.config or {}
    method = results.method
    extras = []
    if method.startswith("jumplora") and config.get("threshold", "global") != "global":
        extras.append(config["threshold"])
    delta = config.get(method, config).get("ella_delta", "sparse")  # the method's settings; an older run's are flat
    if method.endswith("ella") and method.startswith("jumplora") and delta != "sparse":
        extras.append(delta)
    extras += settings_shown
    return (f"{method} ({', '.join(extras)})" if extras else method) + partial_label(results)


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
    if results.bwt is None:  # MTL: one training, one row
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


def from_results(results: RunResults, source: str, fwt: float | None = None, fwt_last_row: float | None = None,
                 finished: float | None = None) -> RunResult:
    bwt = None if results.bwt is None else float(results.bwt)  # None: MTL
    return RunResult(method_label(results), results.order, results.seed, float(results.oa), bwt,
                     results.fwt if results.fwt is not None else fwt, results, source,
                     last_row_fwt(results, fwt_last_row), authors_scored(results),
                     uncertainty.RunFlags.of(results, unlabelled_factors(results)), finished)


# ---------------------------------------------------------------- collecting runs


def results_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if (path / RESULTS).is_file():
        return [path / RESULTS]
    return sorted(p for p in path.rglob(RESULTS) if p.is_file())


def read_run(path: Path, source: str, fwt: float | None = None, fwt_last_row: float | None = None,
             finished: float | None = None) -> RunResult:
    """The run of one `results.json`; a JumpLoRAError naming the file and what is wrong with it otherwise (not JSON,
    not of this schema, a key missing or of the wrong type: `results.read_results`; a nested value of the wrong
    type; a number that is not finite). `finished`: when the run finished; by default the file's modification time
    (a run writes results.json last, once, when it finishes)."""
    results = read_results(path)
    try:
        run = from_results(results, source, fwt, fwt_last_row, path.stat().st_mtime if finished is None else finished)
    except (AttributeError, TypeError, ValueError) as error:
        raise JumpLoRAError(f"{path} holds a value of the wrong type ({error})") from None
    where = first_non_finite(results.to_json())
    if where is not None:
        raise JumpLoRAError(f"{path} holds a number that is not finite ({where}): its training diverged, so none of "
                            "its numbers means anything; run it again with a smaller learning rate")
    return run


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
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    from jumplora import tracking

    client = MlflowClient(tracking_uri=tracking.open_store(tracking.resolve_uri(tracking_uri)))
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
        if path.exists():
            files = results_files(path)
            if not files:
                raise JumpLoRAError(f"{source} holds no {RESULTS}")
            if path.is_file() or (path / RESULTS).is_file():  # named directly: a damaged file is an error
                try:
                    found = [read_run(files[0], str(files[0].parent))]
                except JumpLoRAError as error:
                    raise JumpLoRAError(f"{error}: fix the file or leave its run out of the sources") from None
            else:
                found = [run for run in (skip_damaged(f, str(f.parent)) for f in files) if run is not None]
                if not found:
                    raise JumpLoRAError(f"{source} holds no usable {RESULTS} ({len(files)} damaged, see the warnings)")
        else:
            found = from_experiment(source, tracking_uri)
        runs += found
    if not runs:
        raise JumpLoRAError("no runs found")
    return labelled(latest(runs))


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


# ---------------------------------------------------------------- the tables


def stat(values: list[float], paper: float | None, within: uncertainty.Interval | None = None) -> dict:
    """A table cell: mean ± sample std over seeds (between-seed), and `within`, the 95 % bootstrap interval of that
    mean over the test examples (within-seed; None where a run kept no flags or has no such number)."""
    mean, std = tables.mean_std(values) if values else (None, None)
    return {"mean": mean, "std": std, "n": len(values), "values": values, "paper": paper,
            "within": None if within is None else within.to_json()}


def cell_text(entry: dict) -> str:
    text = tables.mean_std_text(entry["mean"], entry["std"]) + (" (n=1)" if entry["n"] == 1 else "")
    text += within_text(entry)
    return text if entry["paper"] is None else f"{text} (paper {entry['paper']:.2f})"


def within_text(entry: dict) -> str:
    """` [low, high]`: a cell's within-seed interval, or "" without one."""
    return "" if entry.get("within") is None else " " + uncertainty.Interval(*entry["within"]).text()


def paper_value(paper: dict, metric: str, label: str, column) -> float | None:
    by_column = {str(k): v for k, v in (paper.get(metric) or {}).get(label, {}).items()}
    return by_column.get(str(column))


def known_methods() -> list[str]:
    """The paper's order (search_spaces/methods.yaml: the paper's four, then SPEC §7's baselines), then the other
    registered methods (a plugin's) in the registry's order."""
    return list(dict.fromkeys([*spaces.methods_file()["methods"], *METHODS]))


def method_key(label: str, known: list[str]) -> tuple[int, str]:
    """Sorts method labels as `known` (`known_methods`, read once per sort), unknown ones last."""
    method = label.split(" ")[0]
    return known.index(method) if method in known else len(known), label


def method_order(labels: set[str]) -> list[str]:
    known = known_methods()
    return sorted(labels, key=lambda label: method_key(label, known))


def metric_tables(values: Mapping[tuple[str, int, int], Mapping[str, float | None]],
                  paper: dict | None = None,
                  flags: Mapping[tuple[str, int, int], uncertainty.RunFlags | None] | None = None) -> dict:
    """The OA table and the BWT / FWT table of run values {(method label, order, seed): {"oa", "bwt", "fwt",
    "fwt_last_row"}} (FWT None where unknown, BWT and FWT None for MTL; "fwt_last_row" may be absent), beside the
    paper's numbers (default: search_spaces/paper_results.yaml): {"orders", "benchmarks", "methods", "oa": {method:
    {column: stat}}, "transfer": {method: {bench: {bwt, fwt, fwt_last_row}}}}. The paper's FWT stands beside
    `fwt_last_row` (the authors' script's formula, which the paper's column matches; SPEC §4), none beside SPEC's
    `fwt`.

    A benchmark column averages, per seed, the benchmark's orders present in `values` (a seed missing one of them is
    left out), then takes mean ± std over seeds — as the paper's SC / LS columns and BWT / FWT do. A BWT / FWT cell
    takes the seeds whose runs all have the number: none for MTL, so its cells have no mean (printed `–`).

    `flags`: the runs' test flags (`uncertainty.RunFlags`, on the scoring of `values`); each cell then also gets the
    95 % bootstrap interval of its mean (`stat`'s `within`): every run resampled on its own test examples, averaged
    over orders and seeds as the cell averages them, resample by resample; none where a run of the cell has no
    flags."""
    paper = spaces.paper_results() if paper is None else paper
    kept = {key: run for key, run in (flags or {}).items() if run is not None}
    resampled = dict(zip(kept, uncertainty.bootstrap(list(kept.values())), strict=True))

    def within(cells: list[list[tuple[str, int, int]]], metric: str) -> uncertainty.Interval | None:
        """Per seed the mean of its runs (`cells`, one list per seed), then the mean over seeds, per resample."""
        found = [[resampled.get(key, {}).get(metric) for key in keys] for keys in cells]
        if not found or any(array is None for arrays in found for array in arrays):
            return None
        return uncertainty.percentile_interval(np.mean([np.mean(arrays, axis=0) for arrays in found], axis=0))

    orders = sorted({order for _, order, _ in values})
    benchmarks = {name: [o for o in members if o in orders] for name, members in BENCHMARK_ORDERS.items()}
    benchmarks = {name: members for name, members in benchmarks.items() if members}
    methods = method_order({label for label, _, _ in values})
    oa: dict[str, dict] = {}
    transfer: dict[str, dict] = {}
    for method in methods:
        seeds = sorted({seed for label, _, seed in values if label == method})
        oa[method] = {str(o): stat([values[method, o, s]["oa"] for s in seeds if (method, o, s) in values],
                                   paper_value(paper, "oa", method, o),
                                   within([[(method, o, s)] for s in seeds if (method, o, s) in values], "oa"))
                      for o in orders}
        transfer[method] = {}
        for name, members in benchmarks.items():
            complete = [s for s in seeds if all((method, o, s) in values for o in members)]
            per_seed = {"oa": [statistics.fmean(values[method, o, s]["oa"] for o in members) for s in complete]}
            runs = {"oa": [[(method, o, s) for o in members] for s in complete]}
            for metric in ("bwt", "fwt", "fwt_last_row"):
                known = [s for s in complete if all(values[method, o, s].get(metric) is not None for o in members)]
                per_seed[metric] = [statistics.fmean(values[method, o, s][metric] for o in members) for s in known]
                runs[metric] = [[(method, o, s) for o in members] for s in known]
            oa[method][name] = stat(per_seed["oa"], paper_value(paper, "oa", method, name), within(runs["oa"], "oa"))
            papers = {"bwt": paper_value(paper, "bwt", method, name), "fwt": None,
                      "fwt_last_row": paper_value(paper, "fwt", method, name)}
            transfer[method][name] = {metric: stat(per_seed[metric], papers[metric], within(runs[metric], metric))
                                      for metric in ("bwt", "fwt", "fwt_last_row")}
    return {"orders": orders, "benchmarks": benchmarks, "methods": methods, "oa": oa, "transfer": transfer}


def cost_table(costs: Mapping[str, list[dict | None]]) -> dict:
    """Per method, the sum of its runs' costs ({method: [results.json `cost` or None per run]}): runs, how many
    recorded a cost (runs written before it was recorded did not), trainings, optimizer steps, wall hours and
    device-hours with their unit(s)."""
    table = {}
    for method, entries in costs.items():
        known = [entry for entry in entries if entry]
        table[method] = {"runs": len(entries), "recorded": len(known),
                         "trainings": sum(e["trainings"] for e in known),
                         "optimizer_steps": sum(e["optimizer_steps"] for e in known),
                         "wall_hours": sum(e["wall_seconds"] for e in known) / 3600,
                         "device_hours": sum(e["device_hours"] for e in known),
                         "device_unit": "+".join(sorted({e["device_unit"] for e in known}))}
    return table


def unlabelled_notes(results: list[RunResults]) -> list[str]:
    """A line per task whose test file has rows labelled outside the options (MNLI's "-"), saying how the tables score
    them; none when no run counted any."""
    found: dict[str, tuple[int, int]] = {}
    for entry in results:
        found.update(entry.unlabelled_rows())
    return [f"{task}: {rows} of its {rows + labelled} test rows are labelled outside the options; the tables score "
            "them as wrong, as the authors' script does (SPEC §4): runs that dropped them (scoring 'dropped', "
            f"accuracy over the {labelled} others) are rescaled by {labelled}/{rows + labelled}, and the Runs list "
            "shows each run as recorded" for task, (rows, labelled) in sorted(found.items())]


def aggregate(runs: list[RunResult], paper: dict | None = None) -> dict:
    """`metric_tables` of the runs on the authors' scoring (`RunResult.table_values`), their cost per method
    (`cost_table`), the notes on test rows labelled outside the options, and the runs themselves as recorded (method,
    order, seed, OA, BWT, FWT, FWT last row, scoring, cost, source)."""
    values = {(r.label, r.order, r.seed): r.table_values() for r in runs}
    known = known_methods()
    ordered = sorted(runs, key=lambda r: (method_key(r.label, known), r.order, r.seed))
    summary = metric_tables(values, paper, {(r.label, r.order, r.seed): r.flags for r in runs})
    costs: dict[str, list[dict | None]] = {method: [] for method in summary["methods"]}
    for r in ordered:
        costs[r.label].append(r.results.cost)
    unflagged = sum(r.flags is None for r in runs)
    notes = unlabelled_notes([r.results for r in runs])
    if unflagged:
        notes.append(f"{unflagged} of {len(runs)} runs: {uncertainty.NO_FLAGS}")
    return {**summary, "comparisons": comparisons(runs, summary["methods"]), "cost": cost_table(costs),
            "notes": notes,
            "runs": [{"method": r.label, "order": r.order, "seed": r.seed, "oa": r.oa, "bwt": r.bwt, "fwt": r.fwt,
                      "fwt_last_row": r.fwt_last_row, "scoring": scoring(r.results), "cost": r.results.cost,
                      "intervals": {name: interval.to_json() for name, interval in intervals.metrics.items()}
                      if (intervals := uncertainty.intervals_of(r.results)) is not None else None,
                      "source": r.source} for r in ordered]}


REFERENCE_METHOD = "inclora"  # plain LoRA: what the comparisons are against when it is among the runs
COMPARED = ("oa", "bwt")


def comparisons(runs: list[RunResult], methods: list[str]) -> list[dict]:
    """Each method against the reference (`REFERENCE_METHOD`, else the first method), per order and metric
    (`COMPARED`): the runs of the same order and seed (the same test examples) paired, the difference of the means
    over those seeds with its paired bootstrap interval, the probability of improvement and the verdict
    (`uncertainty.compare`, on the authors' scoring as the tables); none for a pair without flags."""
    reference = REFERENCE_METHOD if REFERENCE_METHOD in methods else methods[0]
    by_key = {(r.label, r.order, r.seed): r.flags for r in runs}
    found = []
    for method in (m for m in methods if m != reference):
        for order in sorted({r.order for r in runs if r.label == method}):
            seeds = sorted(s for (label, o, s), kept in by_key.items() if (label, o) == (method, order) and kept
                           and by_key.get((reference, order, s)) is not None
                           and kept.key == by_key[reference, order, s].key)
            for metric in COMPARED if seeds else ():
                compared = uncertainty.compare([by_key[reference, order, s] for s in seeds],
                                               [by_key[method, order, s] for s in seeds], metric)
                if compared is not None:
                    found.append({"method": method, "reference": reference, "order": order, "seeds": seeds,
                                  "metric": metric, "difference": compared.difference,
                                  "interval": compared.interval.to_json(), "improvement": compared.improvement,
                                  "verdict": compared.verdict,
                                  "sentence": compared.sentence(f"{method} (order {order})", reference)})
    return found


def scoring(results: RunResults) -> str | None:
    """How the run scored its test rows labelled outside the options: "wrong", "dropped", or None (not recorded)."""
    return (results.unlabelled_test or {}).get("scoring")


def benchmark_orders(summary: dict, name: str) -> str:
    return ",".join(str(o) for o in summary["benchmarks"][name])


def table_rows(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the OA table and the BWT / FWT table."""
    columns = [str(o) for o in summary["orders"]] + list(summary["benchmarks"])
    header = ["method"] + [f"O{c}" if c.isdigit() else f"{c.upper()} (orders {benchmark_orders(summary, c)})"
                           for c in columns]
    oa_rows = [[m] + [cell_text(summary["oa"][m][c]) for c in columns] for m in summary["methods"]]
    t_header = ["method"] + [f"{TRANSFER_HEADINGS[metric]} {name.upper()}" for name in summary["benchmarks"]
                             for metric in TRANSFER_HEADINGS]
    t_rows = [[m] + [cell_text(summary["transfer"][m][name][metric]) for name in summary["benchmarks"]
                     for metric in TRANSFER_HEADINGS] for m in summary["methods"]]
    cost_rows = [[m, *cost_cells(summary["cost"][m])] for m in summary["methods"]]
    found = [("OA (%): mean ± sample std over seeds (between-seed) " + WITHIN, header, oa_rows),
             ("BWT / FWT (%): per seed the mean over the benchmark's orders, then mean ± sample std over seeds "
              f"(between-seed) {WITHIN}; the paper's FWT beside FWT last row", t_header, t_rows)]
    if summary["comparisons"]:
        reference = summary["comparisons"][0]["reference"]
        rows = [[c["method"], f"O{c['order']}", uncertainty.METRIC_NAMES[c["metric"]], str(len(c["seeds"])),
                 f"{c['difference']:+.2f}", uncertainty.Interval(*c["interval"]).text(digits=2),
                 f"{c['improvement']:.2f}", c["verdict"]] for c in summary["comparisons"]]
        found.append((f"Compared with {reference} on the same test examples (seeds paired): the difference of the "
                      "means (points), its 95 % paired bootstrap interval, the probability of improvement (the share "
                      "of resamples where the method is ahead, ties half) and what the interval says",
                      COMPARISON_HEADER, rows))
    return [*found, ("Cost: the sum over each method's runs", COST_HEADER, cost_rows)]


WITHIN = "[95 % bootstrap interval of that mean over the test examples (within-seed)]"
COMPARISON_HEADER = ["method", "order", "metric", "seeds", "difference", "95 % interval", "P(improvement)",
                     "verdict"]


COST_HEADER = ["method", "runs", "trainings", "optimizer steps", "wall h", "device-hours"]


def cost_cells(entry: dict) -> list[str]:
    """A cost row's cells (`cost_table`); `–` where no run recorded a cost, "k of n" runs where only some did."""
    runs = str(entry["runs"]) if entry["recorded"] == entry["runs"] else f"{entry['recorded']} of {entry['runs']}"
    if not entry["recorded"]:
        return [runs] + [tables.NO_VALUE] * 4
    return [runs, str(entry["trainings"]), str(entry["optimizer_steps"]), f"{entry['wall_hours']:.3f}",
            f"{entry['device_hours']:.3f} {entry['device_unit']}"]


def markdown(summary: dict) -> str:
    parts = ["# JumpLoRA report", ""]
    for title, header, rows in table_rows(summary):
        parts += [f"## {title}", "", tables.markdown(header, rows)]
    if summary["notes"]:
        parts += ["## Test rows labelled outside the options", "", *(f"- {note}" for note in summary["notes"]), ""]
    runs = [[r["method"], str(r["order"]), str(r["seed"]),
             *(tables.number_text(r.get(k)) + run_interval_text(r, k) for k in ("oa", "bwt", "fwt", "fwt_last_row")),
             r["scoring"] or tables.NO_VALUE,
             *run_cost_cells(r["cost"]), r["source"]]
            for r in summary["runs"]]
    parts += ["## Runs (as recorded)", "",
              tables.markdown(["method", "order", "seed", "OA", "BWT", "FWT", "FWT last row", "unlabelled rows",
                               "trainings", "optimizer steps", "wall h", "device-hours", "source"], runs)]
    parts.append(f"Paper numbers: t5-large, mean of 3 seeds (SPEC §6). {FWT_NOTE}{partial_note(summary)}\n")
    return "\n".join(parts)


def run_interval_text(run: dict, metric: str) -> str:
    """` [low, high]`: the 95 % interval of a run's recorded metric (its results.json), or "" without one."""
    interval = (run["intervals"] or {}).get(metric)
    return "" if interval is None else " " + uncertainty.Interval(*interval).text()


def run_cost_cells(cost: dict | None) -> list[str]:
    """A run's cost in the Runs list; `–` for a run written before its cost was recorded."""
    if not cost:
        return [tables.NO_VALUE] * 4
    return [str(cost["trainings"]), str(cost["optimizer_steps"]), f"{cost['wall_seconds'] / 3600:.3f}",
            f"{cost['device_hours']:.3f} {cost['device_unit']}"]


def partial_note(summary: dict) -> str:
    """The note on rows of runs cut by --max-tasks, when there are any."""
    if not any(PARTIAL in method for method in summary["methods"]):
        return ""
    return (" Rows marked [first n of N tasks] are partial orders, runs cut by --max-tasks: their OA, BWT and FWT "
            "are over those tasks only and are not comparable with the paper's, which stands beside none of them.")


# ---------------------------------------------------------------- plots and the page


def oa_bars(summary: dict, path: Path) -> dict[str, list[tuple[float | None, float | None]]]:
    """OA per order (and benchmark), a bar group per column, a bar per method, error bars = sample std (between
    seeds), and beside them, thin and black, the 95 % bootstrap interval of the mean (within-seed) where known."""
    from jumplora import plots

    plt = plots.plt
    columns = [str(o) for o in summary["orders"]] + list(summary["benchmarks"])
    drawn = {m: [(summary["oa"][m][c]["mean"], summary["oa"][m][c]["std"]) for c in columns]
             for m in summary["methods"]}
    width = 0.8 / max(1, len(drawn))
    fig, ax = plt.subplots(figsize=(2 + 1.2 * len(columns), 3.8))
    for k, (method, bars) in enumerate(drawn.items()):
        xs = [i + k * width for i in range(len(columns))]
        ax.bar(xs, [m or 0.0 for m, _ in bars], width, yerr=[s or 0.0 for _, s in bars], capsize=3, label=method)
        within = [(x + width / 4, summary["oa"][method][c]) for x, c in zip(xs, columns, strict=True)
                  if summary["oa"][method][c]["within"] is not None]
        if within:
            ax.errorbar([x for x, _ in within], [e["mean"] for _, e in within], fmt="none", ecolor="black",
                        elinewidth=0.8, capsize=2, yerr=[[max(0.0, e["mean"] - e["within"][0]) for _, e in within],
                                                         [max(0.0, e["within"][1] - e["mean"]) for _, e in within]])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(columns))],
                  [f"O{c}" if c.isdigit() else c.upper() for c in columns])
    ax.set_ylabel("OA (%)")
    ax.set_title("OA, mean ± sample std over seeds; black: 95 % bootstrap interval (within-seed)", fontsize=9)
    ax.legend(fontsize=7)
    plots._save(fig, path)
    return drawn


def report_plots(runs: list[RunResult], summary: dict, out: Path) -> list[Path]:
    from jumplora import plots

    paths = [out / OA_BARS]
    oa_bars(summary, paths[0])
    known = known_methods()
    by_method = sorted(runs, key=lambda r: (method_key(r.label, known), r.seed))
    for order in summary["orders"]:
        # MTL has no BWT (bwt None): it is left out of the radar (plots.bwt_radar would skip it too); a radar per
        # task list, so that a run cut by --max-tasks gets its own (`_first<n>`)
        traces: dict[tuple, list] = {}
        for r in by_method:
            if r.order == order and r.results.accuracy_matrix is not None and r.bwt is not None:
                traces.setdefault(tuple(r.results.tasks), []).append((f"{r.label} s{r.seed}", r.results))
        longest = max((len(tasks) for tasks in traces), default=0)
        for tasks, order_traces in traces.items():
            path = out / f"bwt_radar_order{order}{'' if len(tasks) == longest else f'_first{len(tasks)}'}.png"
            plots.bwt_radar(order_traces, path)
            paths.append(path)
    return paths


def html_page(summary: dict, images: list[Path]) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>JumpLoRA report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
             "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
             "img{max-width:100%;margin:1em 0}</style></head><body><h1>JumpLoRA report</h1>"]
    for title, header, rows in table_rows(summary):
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts.append("<h2>Plots</h2>")
    for image in images:
        data = base64.b64encode(image.read_bytes()).decode()
        parts.append(f"<div><img alt='{html.escape(image.name)}' src='data:image/png;base64,{data}'></div>")
    parts += [f"<p>{html.escape(note)}</p>" for note in summary["notes"]]
    parts.append(f"<p>Paper numbers: t5-large, mean of 3 seeds (SPEC §6). "
                 f"{html.escape(FWT_NOTE + partial_note(summary))}</p></body></html>")
    return "\n".join(parts)


def write_report(sources: list[str], out: Path, tracking_uri: str | None = None,
                 overwrite: bool = False) -> tuple[dict, str]:
    """The report of `sources` in the folder `out`, written aside and put in place once complete; a report there
    (checked up front: `ownership.check_written_aside`) is replaced only with `overwrite`, and whole (no plot of it
    left beside the new ones)."""
    runs = collect(sources, tracking_uri)
    summary = aggregate(runs)
    text = markdown(summary)
    with ownership.written_aside(out, ownership.REPORT, "jumplora report", "--out", overwrite) as where:
        images = report_plots(runs, summary, where)
        atomic_write_text(where / REPORT_MD, text)
        atomic_write_text(where / REPORT_JSON, json.dumps(summary, indent=1, default=_json_default))
        atomic_write_text(where / REPORT_HTML, html_page(summary, images))
    return summary, text


def _json_default(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON serialisable: {value!r}")
