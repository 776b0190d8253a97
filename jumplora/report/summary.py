"""The report's tables as data (`aggregate`): per method label, OA by order and benchmark, BWT / FWT by benchmark,
each cell mean ± sample std over seeds beside the paper's number; what the runs cost; each method against plain LoRA
on the same test examples (`comparisons`); the runs as recorded."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

import numpy as np

from jumplora import metrics, spaces, tables, uncertainty
from jumplora.data.tasks import BENCHMARK_ORDERS
from jumplora.methods import METHODS
from jumplora.report.runs import RunResult, unlabelled_factors
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


def method_order(labels: set[str]) -> list[str]:
    known = known_methods()
    return sorted(labels, key=lambda label: method_key(label, known))


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
                  flags: Mapping[tuple[str, int, int], uncertainty.RunFlags | None] | None = None) -> dict:
    """The OA table and the BWT / FWT table of run values {(method label, order, seed): {"oa", "bwt", "fwt",
    "fwt_last_row", "la"}} (FWT None where unknown, BWT, FWT and LA None for MTL; "fwt_last_row" and "la" may be
    absent), beside the paper's numbers (default: search_spaces/paper_results.yaml): {"orders", "benchmarks",
    "methods", "oa": {method: {column: stat}}, "transfer": {method: {bench: {bwt, fwt, fwt_last_row, la}}}}. The
    paper's FWT stands beside `fwt_last_row` (the authors' script's formula, which the paper's column matches; SPEC
    §4), none beside SPEC's `fwt`.

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
            for metric in TRANSFER:
                known = [s for s in complete if all(values[method, o, s].get(metric) is not None for o in members)]
                per_seed[metric] = [statistics.fmean(values[method, o, s][metric] for o in members) for s in known]
                runs[metric] = [[(method, o, s) for o in members] for s in known]
            oa[method][name] = stat(per_seed["oa"], paper_value(paper, "oa", method, name), within(runs["oa"], "oa"))
            papers = {"bwt": paper_value(paper, "bwt", method, name), "fwt": None,
                      "fwt_last_row": paper_value(paper, "fwt", method, name), "la": None}
            transfer[method][name] = {metric: stat(per_seed[metric], papers[metric], within(runs[metric], metric))
                                      for metric in TRANSFER}
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
    values = {(r.label, r.order, r.seed): {**r.table_values(), "la": learning_value(r)} for r in runs}
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
            "runs": [{"method": r.label, "order": r.order, "seed": r.seed, "oa": r.oa,
                      "la": r.results.learning_accuracy(), "bwt": r.bwt, "fwt": r.fwt,
                      "fwt_last_row": r.fwt_last_row, "scoring": scoring(r.results), "cost": r.results.cost,
                      "intervals": {name: interval.to_json() for name, interval in intervals.metrics.items()}
                      if (intervals := uncertainty.intervals_of(r.results)) is not None else None,
                      "source": r.source} for r in ordered]}


REFERENCE_METHOD = "inclora"  # plain LoRA: what the comparisons are against when it is among the runs
COMPARED = ("oa", "bwt")


def comparison_columns(runs: list[RunResult], method: str) -> list[tuple[str, list[int]]]:
    """The columns a method is compared in: each of its orders, and each benchmark of two or more of them (its
    orders averaged per seed, as the tables' benchmark columns)."""
    orders = sorted({r.order for r in runs if r.label == method})
    benchmarks = [(name, [o for o in members if o in orders]) for name, members in BENCHMARK_ORDERS.items()]
    return [(str(o), [o]) for o in orders] + [(name, members) for name, members in benchmarks if len(members) > 1]


def comparisons(runs: list[RunResult], methods: list[str]) -> list[dict]:
    """Each method against the reference (`REFERENCE_METHOD`, else the first method), per column
    (`comparison_columns`) and metric (`COMPARED`): the runs of the same order and seed (the same test examples)
    paired, over the seeds that have every order of the column on both sides (`uncertainty.compare`: a seed's orders
    averaged, the seeds the unit of evidence), on the authors' scoring as the tables; none for a pair without flags.
    The table's k comparisons are a family (`uncertainty.in_family`: each at 1 − 0.05 / k)."""
    reference = REFERENCE_METHOD if REFERENCE_METHOD in methods else methods[0]
    by_key = {(r.label, r.order, r.seed): r.flags for r in runs}

    def paired(method: str, order: int, seed: int) -> bool:
        mine, theirs = by_key.get((method, order, seed)), by_key.get((reference, order, seed))
        return mine is not None and theirs is not None and mine.key == theirs.key

    found = []
    for method in (m for m in methods if m != reference):
        for column, orders in comparison_columns(runs, method):
            seeds = sorted(s for s in {r.seed for r in runs if r.label == method}
                           if all(paired(method, o, s) for o in orders))
            runs_of = [(o, s) for s in seeds for o in orders]
            for metric in COMPARED if seeds else ():
                compared = uncertainty.compare([by_key[reference, o, s] for o, s in runs_of],
                                               [by_key[method, o, s] for o, s in runs_of], metric,
                                               seeds=[s for _, s in runs_of])
                if compared is not None:
                    found.append(({"method": method, "reference": reference, "column": column,
                                   "order": orders[0] if column.isdigit() else None, "orders": orders,
                                   "seeds": seeds, "metric": metric}, compared))
    family = uncertainty.in_family([compared for _, compared in found])
    return [{**entry, **compared.to_json(), "sentence": compared.sentence(f"{entry['method']} ({column_text(entry)})",
                                                                          reference)}
            for (entry, _), compared in zip(found, family, strict=True)]


def column_text(entry: dict) -> str:
    """A comparison's column as the tables head it: `O1`, or `SC (orders 1,2,3)`."""
    if entry["order"] is not None:
        return f"O{entry['order']}"
    return f"{entry['column'].upper()} (orders {','.join(map(str, entry['orders']))})"


def scoring(results: RunResults) -> str | None:
    """How the run scored its test rows labelled outside the options: "wrong", "dropped", or None (not recorded)."""
    return (results.unlabelled_test or {}).get("scoring")
