"""The report's tables as data (`aggregate`): per method label, OA by order and benchmark, BWT / FWT by benchmark,
each cell mean ± sample std over seeds beside the paper's number; what the runs cost; each method against plain LoRA
on the same test examples (`comparisons`); the runs as recorded."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from functools import partial

import numpy as np

from jumplora import metrics, spaces, tables, uncertainty
from jumplora.config import SYNTHETIC
from jumplora.data.location import TINY_PRESETS
from jumplora.data.tasks import BENCHMARK_ORDERS
from jumplora.methods import METHODS
from jumplora.report.runs import REFERENCE, RunResult, partial_label, unlabelled_factors
from jumplora.results import RunResults


def stat(values: list[float], paper: float | None, within: uncertainty.Interval | None = None) -> dict:
    """A table cell: mean ± sample std over seeds (between-seed), and `within`, the 95 % bootstrap interval of that
    mean over the test examples (within-seed; None where a run kept no flags or has no such number)."""
    mean, std = tables.mean_std(values) if values else (None, None)
    return {"mean": mean, "std": std, "n": len(values), "values": values, "paper": paper,
            "within": None if within is None else within.to_json()}



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


# the BWT / FWT table's metrics, and beside them the learning accuracy (the diagonal's mean: plasticity beside
# forgetting; the paper has none)
TRANSFER = ("bwt", "fwt", "fwt_last_row", "la")


def learning_value(run: RunResult) -> float | None:
    """The run's learning accuracy on the authors' scoring, as the tables read every number (`unlabelled_factors`);
    from the matrix for a run written before it was recorded; None for MTL."""
    results = run.results
    factors = unlabelled_factors(results)
    if factors is None or results.joint:
        return results.learning_accuracy()
    return metrics.learning_accuracy([[None if v is None else v * f for v, f in zip(row, factors, strict=True)]
                                      for row in results.accuracy_matrix])


def metric_tables(values: Mapping[tuple[str, int, int], Mapping[str, float | None]],
                  paper: dict | None = None,
                  flags: Mapping[tuple[str, int, int], uncertainty.RunFlags | None] | None = None,
                  whole: bool = False) -> dict:
    """The OA table and the BWT / FWT table of run values {(method label, order, seed): {"oa", "bwt", "fwt",
    "fwt_last_row", "la"}} (FWT None where unknown, BWT, FWT and LA None for MTL; "fwt_last_row" and "la" may be
    absent), beside the paper's numbers (default: search_spaces/paper_results.yaml; the paper's FWT beside
    `fwt_last_row`, SPEC §4): {"orders", "benchmarks", "transfer_columns", "methods", "oa": {method: {column: stat}},
    "transfer": {method: {transfer column: {bwt, fwt, fwt_last_row, la}}}}.

    A benchmark column averages, per seed, the benchmark's orders present in `values` (a seed missing one is left
    out), then takes mean ± std over seeds, as the paper's SC / LS columns do; columns: `table_columns` (`whole`: the
    report's). A BWT / FWT cell takes the seeds whose runs all have the number (none for MTL: printed `–`).
    `flags`: the runs' test flags (`uncertainty.RunFlags`); each cell then also gets the 95 % bootstrap interval of
    its mean (`stat`'s `within`, `seeds_interval`), none where a run of the cell has no flags."""
    paper = spaces.paper_results() if paper is None else paper
    kept = {key: run for key, run in (flags or {}).items() if run is not None}
    within = partial(seeds_interval, dict(zip(kept, uncertainty.bootstrap(list(kept.values())), strict=True)))
    orders = sorted({order for _, order, _ in values})
    benchmarks, transfer_columns = table_columns(orders, whole)
    methods = sorted({label for label, _, _ in values}, key=partial(method_key, known=known_methods()))
    oa: dict[str, dict] = {}
    transfer: dict[str, dict] = {}
    for method in methods:
        seeds = sorted({seed for label, _, seed in values if label == method})
        cells = {}  # (column, metric): its cell, an order's alike (its one run per seed) and a benchmark's
        for name, members in {**{str(o): [o] for o in orders}, **transfer_columns}.items():
            complete = [s for s in seeds if all((method, o, s) in values for o in members)]
            papers = {"oa": paper_value(paper, "oa", method, name), "bwt": paper_value(paper, "bwt", method, name),
                      "fwt_last_row": paper_value(paper, "fwt", method, name)}
            for metric in ("oa", *TRANSFER) if name in transfer_columns else ("oa",):  # only the cells read
                known = [s for s in complete if all(values[method, o, s].get(metric) is not None for o in members)]
                per_seed = [statistics.fmean(values[method, o, s][metric] for o in members) for s in known]
                runs = [[(method, o, s) for o in members] for s in known]
                cells[name, metric] = stat(per_seed, papers.get(metric), within(runs, metric))
        oa[method] = {name: cells[name, "oa"] for name in [*map(str, orders), *benchmarks]}
        transfer[method] = {name: {metric: cells[name, metric] for metric in TRANSFER} for name in transfer_columns}
    return {"orders": orders, "benchmarks": benchmarks, "transfer_columns": list(transfer_columns), "methods": methods,
            "oa": oa, "transfer": transfer}


def seeds_interval(resampled: Mapping[tuple[str, int, int], dict], cells: list[list[tuple[str, int, int]]],
                   metric: str) -> uncertainty.Interval | None:
    """A cell's 95 % bootstrap interval from its runs' resampled numbers (`resampled`): per seed the mean of its runs
    (`cells`, one list per seed), then the mean over seeds, per resample; None where a run has none."""
    found = [[resampled.get(key, {}).get(metric) for key in keys] for keys in cells]
    if not found or any(array is None for arrays in found for array in arrays):
        return None
    return uncertainty.percentile_interval(np.mean([np.mean(arrays, axis=0) for arrays in found], axis=0))


def table_columns(orders: list[int], whole: bool) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """`metric_tables`' benchmark columns and its BWT / FWT table's columns, each a name and its orders among
    `orders`. With `whole` (the report) a benchmark is a column only when all of its orders are there
    (`whole_benchmarks`), and the BWT / FWT table has a column per order of no such benchmark; without it (a sweep's
    tables) a benchmark of any of its orders is a column, and the BWT / FWT table's columns are the benchmarks'."""
    if whole:  # BWT / FWT / LA by whole benchmark, and by order for an order of none among the runs
        benchmarks = whole_benchmarks(orders)
        covered = {o for members in benchmarks.values() for o in members}
        return benchmarks, {**benchmarks, **{str(o): [o] for o in orders if o not in covered}}
    benchmarks = {name: [o for o in members if o in orders] for name, members in BENCHMARK_ORDERS.items()}
    benchmarks = {name: members for name, members in benchmarks.items() if members}
    return benchmarks, benchmarks


def whole_benchmarks(orders) -> dict[str, list[int]]:
    """The benchmarks (`BENCHMARK_ORDERS`: SC, LS) all of whose orders are among `orders`, with their orders: a
    column of SC or LS is the mean over its whole order set, as the paper's, never over the orders that happen to
    have run."""
    return {name: list(members) for name, members in BENCHMARK_ORDERS.items() if set(members) <= set(orders)}


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


CAPS = {"max_tasks": "--max-tasks", "max_train_per_task": "--max-train-per-task",
        "max_eval_per_task": "--max-eval-per-task"}


def incomparable(results: RunResults) -> list[str]:
    """Why the run's numbers cannot stand beside the paper's ([] when they can): the synthetic benchmark (its config's
    `data_dir` None, as a run records it: `data.location`; a run without a config counts as the defaults', the tiny
    model on the synthetic benchmark), a tiny preset for a model, or caps on its examples or tasks (--max-tasks where
    it cut the order: `partial_label`)."""
    config = results.config or {}
    reasons = []
    if config.get("data_dir") in (None, SYNTHETIC):
        reasons.append("synthetic benchmark, not CL_Benchmark")
    caps = [f"{flag} {config[name]}" for name, flag in CAPS.items() if config.get(name) is not None
            and (name != "max_tasks" or partial_label(results))]
    if caps:
        reasons.append(f"capped at {', '.join(caps)}")
    model = config.get("model", TINY_PRESETS[0])
    if model in TINY_PRESETS:
        reasons.append(f"tiny model ({model}), not t5-large")
    return reasons


def paper_notes(runs: list[RunResult], paper: dict) -> tuple[dict, list[str]]:
    """`paper` without the figures of every method label that has a run not comparable with them (`incomparable`), and
    a line per reason naming the labels it leaves without one (only labels the paper has a figure for), in the order
    of `runs` (the tables')."""
    reasons: dict[str, dict[str, None]] = {}  # each reason's labels, in order, once
    for run in runs:
        for reason in incomparable(run.results):
            reasons.setdefault(reason, {})[run.label] = None
    dropped = {label for labels in reasons.values() for label in labels}
    kept = {metric: {label: figures for label, figures in (by_label or {}).items() if label not in dropped}
            for metric, by_label in paper.items()}
    figured = {label for by_label in paper.values() for label in (by_label or {})}
    notes = [f"no paper figure beside {', '.join(shown)}: {reason}" for reason, labels in reasons.items()
             if (shown := [label for label in labels if label in figured])]
    return kept, notes


def aggregate(runs: list[RunResult], paper: dict | None = None) -> dict:
    """`metric_tables` of the runs on the authors' scoring (`RunResult.table_values`), beside the paper's figures only
    for the methods whose every run can be compared with them (`paper_notes`, with a line per reason why not),
    their cost per method (`cost_table`), the notes on test rows labelled outside the options, and the runs themselves
    as recorded (method, order, seed, OA, BWT, FWT, FWT last row, scoring, cost, source)."""
    values = {(r.label, r.order, r.seed): {**r.table_values(), "la": learning_value(r)} for r in runs}
    known = known_methods()
    ordered = sorted(runs, key=lambda r: (method_key(r.label, known), r.order, r.seed))
    paper, no_paper = paper_notes(ordered, spaces.paper_results() if paper is None else paper)
    summary = metric_tables(values, paper, {(r.label, r.order, r.seed): r.flags for r in runs}, whole=True)
    costs = {method: [r.results.cost for r in ordered if r.label == method] for method in summary["methods"]}
    unflagged = sum(r.flags is None for r in runs)
    notes = unlabelled_notes([r.results for r in runs])
    if unflagged:
        notes.append(f"{unflagged} of {len(runs)} runs: {uncertainty.NO_FLAGS}")
    compared, trade_offs = comparisons(runs, summary["methods"])
    return {**summary, "comparisons": compared, "trade_offs": trade_offs, "cost": cost_table(costs),
            "paper_notes": no_paper, "notes": notes,
            "runs": [{"method": r.label, "order": r.order, "seed": r.seed, "oa": r.oa,
                      "la": r.results.learning_accuracy(), "bwt": r.bwt, "fwt": r.fwt,
                      "fwt_last_row": r.fwt_last_row, "scoring": scoring(r.results), "cost": r.results.cost,
                      "intervals": {name: interval.to_json() for name, interval in intervals.metrics.items()}
                      if (intervals := uncertainty.intervals_of(r.results)) is not None else None,
                      "source": r.source} for r in ordered]}


COMPARED = ("oa", "bwt", "la")  # LA beside BWT: less forgetting with less learning is a trade-off (`trade_offs`)


def comparison_columns(runs: list[RunResult], method: str) -> list[tuple[str, list[int]]]:
    """The columns a method is compared in: each of its orders, and each benchmark all of whose orders it has
    (`whole_benchmarks`; its orders averaged per seed, as the tables' benchmark columns)."""
    orders = sorted({r.order for r in runs if r.label == method})
    return [(str(o), [o]) for o in orders] + list(whole_benchmarks(orders).items())


def comparisons(runs: list[RunResult], methods: list[str]) -> tuple[list[dict], list[dict]]:
    """Each method against the reference (`runs.REFERENCE`, else the first method), per column
    (`comparison_columns`) and metric (`COMPARED`): the runs of the same order and seed (the same test examples)
    paired, over the seeds that have every order of the column on both sides (`uncertainty.compare`: a seed's orders
    averaged, the seeds the unit of evidence), on the authors' scoring as the tables; none for a pair without flags.
    The table's k comparisons are a family (`uncertainty.in_family`: each at 1 − 0.05 / k). Then the trade-offs: per
    method and column where it forgets less than the reference while it learned less (`uncertainty.trade_off`, on
    the family's BWT and LA comparisons), the sentence that says so."""
    reference = REFERENCE if REFERENCE in methods else methods[0]
    by_key = {(r.label, r.order, r.seed): r.flags for r in runs}

    def paired(method: str, order: int, seed: int) -> bool:
        mine, theirs = by_key.get((method, order, seed)), by_key.get((reference, order, seed))
        return mine is not None and theirs is not None and mine.key == theirs.key

    found = []
    sides = {}  # (method, column): the paired runs, reference's and the method's
    for method in (m for m in methods if m != reference):
        for column, orders in comparison_columns(runs, method):
            seeds = sorted(s for s in {r.seed for r in runs if r.label == method}
                           if all(paired(method, o, s) for o in orders))
            runs_of = [(o, s) for s in seeds for o in orders]
            sides[method, column] = ([by_key[reference, o, s] for o, s in runs_of],
                                     [by_key[method, o, s] for o, s in runs_of])
            for metric in COMPARED if seeds else ():
                compared = uncertainty.compare(*sides[method, column], metric, seeds=[s for _, s in runs_of])
                if compared is not None:
                    found.append(({"method": method, "reference": reference, "column": column,
                                   "order": orders[0] if column.isdigit() else None, "orders": orders,
                                   "seeds": seeds, "metric": metric}, compared))
    entries, by_column = [], {}  # by_column: per (method, column), its entry and each metric's comparison
    for (entry, _), compared in zip(found, uncertainty.in_family([compared for _, compared in found]), strict=True):
        entries.append({**entry, **compared.to_json(), "sentence": compared.sentence(compared_name(entry), reference)})
        by_column.setdefault((entry["method"], entry["column"]), {"entry": entry})[entry["metric"]] = compared
    trade_offs = []
    for (method, column), found_here in by_column.items():
        entry = found_here["entry"]
        said = uncertainty.trade_off(*sides[method, column], found_here.get("bwt"), found_here.get("la"),
                                     compared_name(entry), reference)
        if said:
            trade_offs.append({key: entry[key] for key in ("method", "reference", "column", "order", "orders",
                                                           "seeds")} | {"sentence": said})
    return entries, trade_offs


def compared_name(entry: dict) -> str:
    """A method in a comparison's sentences: `jumplora+ella (O1)`."""
    return f"{entry['method']} ({column_text(entry)})"


def column_text(entry: dict) -> str:
    """A comparison's column as the tables head it: `O1`, or `SC (orders 1,2,3)`."""
    if entry["order"] is not None:
        return f"O{entry['order']}"
    return f"{entry['column'].upper()} (orders {','.join(map(str, entry['orders']))})"


def scoring(results: RunResults) -> str | None:
    """How the run scored its test rows labelled outside the options: "wrong", "dropped", or None (not recorded)."""
    return (results.unlabelled_test or {}).get("scoring")
