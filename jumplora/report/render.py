"""The report written (`write_report`): its tables as Markdown, JSON and an HTML page with the plots (OA bars, a BWT
radar per order), into a folder put in place once complete."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from jumplora import ownership, tables, uncertainty
from jumplora.report.runs import PARTIAL, RunResult, collect, comparison_notes
from jumplora.report.summary import aggregate, column_text, cost_table, known_methods, method_key

NOT_COMPARED = "Methods not compared, and why"

REPORT_MD, REPORT_HTML, REPORT_JSON = "report.md", "report.html", "report.json"
OA_BARS = "oa_by_method.png"
TRANSFER_HEADINGS = {"bwt": "BWT", "fwt": "FWT", "fwt_last_row": "FWT last row", "la": "LA"}
FWT_NOTE = ("FWT = mean_j (a[j][j] − a0[j]) (SPEC §4), a0 = the method's own adapter trained on each task alone; "
            "FWT last row = mean_j (a[T][j] − a0[j]), the authors' evaluation script's formula, with a0 = plain LoRA "
            "trained on each task alone, one a0 shared by every method as in the paper: the paper's FWT is shown "
            "beside FWT last row.")


def cell_text(entry: dict) -> str:
    text = tables.mean_std_text(entry["mean"], entry["std"]) + (" (n=1)" if entry["n"] == 1 else "")
    text += within_text(entry)
    return text if entry["paper"] is None else f"{text} (paper {entry['paper']:.2f})"


def within_text(entry: dict) -> str:
    """` [low, high]`: a cell's within-seed interval, or "" without one."""
    return interval_text(entry.get("within"))


def interval_text(interval: list[float] | None) -> str:
    """` [low, high]`: a 95 % interval (a cell's within-seed one, a run's recorded one), or "" without one."""
    return "" if interval is None else " " + uncertainty.Interval(*interval).text()


def table_rows(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the OA table and the BWT / FWT table."""
    columns = [str(o) for o in summary["orders"]] + list(summary["benchmarks"])
    members = {name: ",".join(map(str, orders)) for name, orders in summary["benchmarks"].items()}
    header = ["method"] + [f"O{c}" if c.isdigit() else f"{c.upper()} (orders {members[c]})" for c in columns]
    oa_rows = [[m] + [cell_text(summary["oa"][m][c]) for c in columns] for m in summary["methods"]]
    transfer_columns = summary.get("transfer_columns", list(summary["benchmarks"]))
    t_header = ["method"] + [f"{TRANSFER_HEADINGS[metric]} {f'O{name}' if name.isdigit() else name.upper()}"
                             for name in transfer_columns for metric in TRANSFER_HEADINGS]
    t_rows = [[m] + [cell_text(summary["transfer"][m][name][metric]) for name in transfer_columns
                     for metric in TRANSFER_HEADINGS] for m in summary["methods"]]
    cost_rows = [[m, *cost_cells(summary["cost"][m])] for m in summary["methods"]]
    found = [("OA (%): mean ± sample std over seeds (between-seed) " + WITHIN, header, oa_rows),
             ("BWT / FWT (%): per seed the mean over the benchmark's orders (an order of no whole benchmark: its "
              "own column), then mean ± sample std over seeds "
              f"(between-seed) {WITHIN}; the paper's FWT beside FWT last row; LA: the learning accuracy, each task's "
              "accuracy right after it was learned (the diagonal's mean), plasticity beside BWT's forgetting",
              t_header, t_rows)]
    if summary["comparisons"]:
        found.append(comparison_table(summary["comparisons"]))
    return [*found, ("Cost: the sum over each method's runs", COST_HEADER, cost_rows)]


WITHIN = "[95 % bootstrap interval of that mean over the test examples (within-seed)]"
COMPARISON_HEADER = ["method", "order", "metric", "seeds", "difference", "interval", "P(improvement)", "verdict"]


def comparison_table(comparisons: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of the comparisons (`report.comparisons`): the title says how many and at what
    confidence (`uncertainty.family_text`); a row without a verdict has no interval (`–`), one with fewer than two
    seeds no probability of improvement."""
    reference = comparisons[0]["reference"]
    k = sum(c["interval"] is not None for c in comparisons)
    rows = [[c["method"], column_text(c), uncertainty.METRIC_NAMES[c["metric"]], str(len(c["seeds"])),
             tables.NO_VALUE if c["difference"] is None else f"{c['difference']:+.2f}",
             tables.NO_VALUE if c["interval"] is None else uncertainty.Interval(*c["interval"]).text(digits=2),
             tables.NO_VALUE if c["improvement"] is None
             else f"{c['improvement']:.2f} {uncertainty.Interval(*c['improvement_interval']).text(digits=2)}",
             c["verdict"]] for c in comparisons]
    return (f"Compared with {reference} on the same test examples (seeds paired): {uncertainty.family_text(k)}. The "
            f"difference of the means (points) and its interval {uncertainty.COMPARISON_METHOD}; the probability of "
            f"improvement {uncertainty.IMPROVEMENT_METHOD}; and what the interval says", COMPARISON_HEADER, rows)


COST_HEADER = ["method", "runs", "trainings", "optimizer steps", "wall h", "device-hours"]


def cost_cells(entry: dict) -> list[str]:
    """A cost row's cells (`cost_table`); `–` where no run recorded a cost, "k of n" runs where only some did."""
    runs = str(entry["runs"]) if entry["recorded"] == entry["runs"] else f"{entry['recorded']} of {entry['runs']}"
    if not entry["recorded"]:
        return [runs] + [tables.NO_VALUE] * 4
    return [runs, str(entry["trainings"]), str(entry["optimizer_steps"]), f"{entry['wall_hours']:.3f}",
            f"{entry['device_hours']:.3f} {entry['device_unit']}"]


NO_PAPER = "No paper figures, and why"
TRADE_OFFS = "Less forgetting, less learning"


def note_sections(summary: dict) -> list[tuple[str, list[str]]]:
    """(heading, lines) of each note section that has lines (a missing comparison is said, never silent)."""
    return [(title, lines) for title, lines in ((NO_PAPER, summary.get("paper_notes")),
                                                (NOT_COMPARED, comparison_notes(summary))) if lines]


def markdown(summary: dict) -> str:
    parts = ["# JumpLoRA report", ""]
    for title, header, rows in table_rows(summary):
        parts += [f"## {title}", "", tables.markdown(header, rows)]
        if header == COMPARISON_HEADER and (said := [t["sentence"] for t in summary.get("trade_offs", [])]):
            parts += [f"### {TRADE_OFFS}", "", *(f"- {line}" for line in said), ""]
    for title, lines in note_sections(summary):
        parts += [f"## {title}", "", *(f"- {note}" for note in lines), ""]
    if summary["notes"]:
        parts += ["## Test rows labelled outside the options", "", *(f"- {note}" for note in summary["notes"]), ""]
    runs = [[r["method"], str(r["order"]), str(r["seed"]),
             *(tables.number_text(r.get(k)) + interval_text((r["intervals"] or {}).get(k))
               for k in ("oa", "la", "bwt", "fwt", "fwt_last_row")),
             r["scoring"] or tables.NO_VALUE,
             *run_cost_cells(r["cost"]), r["source"]]
            for r in summary["runs"]]
    parts += ["## Runs (as recorded)", "",
              tables.markdown(["method", "order", "seed", "OA", "LA", "BWT", "FWT", "FWT last row", "unlabelled rows",
                               "trainings", "optimizer steps", "wall h", "device-hours", "source"], runs)]
    parts.append(f"Paper numbers: t5-large, mean of 3 seeds (SPEC §6). {FWT_NOTE}{partial_note(summary)}\n")
    return "\n".join(parts)


def run_cost_cells(cost: dict | None) -> list[str]:
    """A run's cost in the Runs list: its cells of the cost table as a method of that one run (`–` for a run written
    before its cost was recorded)."""
    return cost_cells(cost_table({"run": [cost]})["run"])[1:]


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
        if header == COMPARISON_HEADER and (said := [t["sentence"] for t in summary.get("trade_offs", [])]):
            parts += [f"<h3>{TRADE_OFFS}</h3><ul>", *(f"<li>{html.escape(line)}</li>" for line in said), "</ul>"]
    for title, lines in note_sections(summary):
        parts += [f"<h2>{title}</h2><ul>", *(f"<li>{html.escape(note)}</li>" for note in lines), "</ul>"]
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
    """The report of `sources` in the folder `out`, written aside and put in place once complete (`ownership.Target`);
    a report there (checked up front: `ownership.check_target`) is replaced only with `overwrite`, deleting only the
    files its record names (no plot of it left beside the new ones)."""
    runs = collect(sources, tracking_uri)
    summary = aggregate(runs)
    text = markdown(summary)
    with ownership.Target(out, ownership.REPORT, "jumplora report", "--out", overwrite, aside=True) as target:
        images = report_plots(runs, summary, target.path)
        ownership.write_text(target.path / REPORT_MD, text)
        ownership.write_text(target.path / REPORT_JSON, json.dumps(summary, indent=1))
        ownership.write_text(target.path / REPORT_HTML, html_page(summary, images))
    return summary, text
