"""The figures of a run, a grid and a report (matplotlib, Agg backend, PNG). Each function draws from a
`results.json` payload (or a grid's stage records), saves the figure and returns the numbers it drew, so that tests
can check them against an independent computation. A joint method (MTL) has one row or line, named after the method
(`record.training_names`), and no BWT radar."""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jumplora.errors import writing  # noqa: E402
from jumplora.ownership import written  # noqa: E402
from jumplora.record import training_names  # noqa: E402
from jumplora.results import RunResults, StageRecord  # noqa: E402

HEATMAP = "accuracy_heatmap.png"
SPARSITY = "sparsity_by_layer.png"
OVERLAP = "overlap.png"
BWT_RADAR = "bwt_radar.png"
GRID_LAMBDAS = "grid_lambdas.png"
DPI = 100


def _save(fig, path: Path) -> None:
    """Written aside and renamed (`ownership.written`): a failed write leaves no partial figure."""
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
        with written(path) as tmp:
            fig.savefig(tmp, dpi=DPI, bbox_inches="tight", format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)


def accuracy_heatmap(results: RunResults, path: Path) -> np.ndarray:
    """Rows: after training task i; columns: task j; values: test accuracy in %, blank above the diagonal."""
    values = np.array([[math.nan if v is None else 100.0 * v for v in row] for row in results.accuracy_matrix],
                      dtype=float)
    tasks, rows = results.tasks, training_names(results)  # MTL: one row, after its one training
    size = len(tasks)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * size, 0.8 + 0.5 * len(rows)))
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=100)
    for i in range(len(rows)):
        for j in range(size):
            if not math.isnan(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.1f}", ha="center", va="center", fontsize=8,
                        color="white" if values[i, j] < 60 else "black")
    ax.set_xticks(range(size), tasks, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel("evaluated on task j")
    ax.set_ylabel("after training task i" if rows == list(tasks) else "after training")
    ax.set_title(f"test accuracy (%) · order {results.order} · {results.method} · seed {results.seed}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    _save(fig, path)
    return values


def block_sort_key(block: str) -> tuple[int, int]:
    """Encoder blocks first, then decoder blocks, each by index."""
    match = re.search(r"(\d+)$", block)
    return (0 if block.startswith("encoder") else 1, int(match.group(1)) if match else 0)


def sparsity_by_layer(results: RunResults, path: Path) -> tuple[list[str], dict[str, list[float]]]:
    """x: encoder then decoder block (a causal model: its decoder layers); y: % zero entries of each task's ΔW_final
    in that block; a line per task (MTL: one, its one training)."""
    blocks = sorted(results.sparsity[0]["per_layer"], key=block_sort_key)
    lines = {task: [100.0 * entry["per_layer"][b] for b in blocks]
             for task, entry in zip(training_names(results), results.sparsity, strict=True)}
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(blocks) + 2), 3.6))
    for task, values in lines.items():
        ax.plot(range(len(blocks)), values, marker="o", markersize=3, label=task)
    n_encoder = sum(b.startswith("encoder") for b in blocks)
    if 0 < n_encoder < len(blocks):
        ax.axvline(n_encoder - 0.5, color="grey", linestyle=":", linewidth=1)
    labels = [("E" if b.startswith("encoder") else "D") + str(block_sort_key(b)[1]) for b in blocks]
    ax.set_xticks(range(len(blocks)), labels, fontsize=8)
    ax.set_xlabel("block (E: encoder, D: decoder)" if n_encoder else "decoder layer")
    ax.set_ylabel("zero entries of ΔW_final (%)")
    ax.set_title(f"sparsity by layer · order {results.order} · {results.method}", fontsize=9)
    ax.legend(fontsize=7, ncol=2 if len(lines) > 6 else 1, loc="best")
    _save(fig, path)
    return blocks, lines


def overlap(results: RunResults, path: Path) -> tuple[np.ndarray, list[float | None]]:
    """Left: Jaccard of the tasks' supports (mean over modules); right: each task's mean Jaccard with the earlier
    tasks in the middle block (SPEC §4; a causal model: its middle decoder layer). MTL: its one training alone."""
    matrix = np.array(results.jaccard["matrix"], dtype=float)
    curve = results.jaccard["mean_with_earlier_middle_block"]
    tasks = training_names(results)
    size = len(tasks)
    fig, (left, right) = plt.subplots(1, 2, figsize=(5.0 + 1.2 * size, 1.8 + 0.5 * size), layout="constrained")
    image = left.imshow(matrix, cmap="magma", vmin=0, vmax=1)
    for i in range(size):
        for j in range(size):
            left.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7,
                      color="white" if matrix[i, j] < 0.5 else "black")
    left.set_xticks(range(size), tasks, rotation=45, ha="right", fontsize=8)
    left.set_yticks(range(size), tasks, fontsize=8)
    left.set_title("Jaccard of supports (mean over modules)", fontsize=9)
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04)
    xs = [t for t, v in enumerate(curve) if v is not None]
    right.plot(xs, [curve[t] for t in xs], marker="o")
    right.set_xticks(range(size), tasks, rotation=45, ha="right", fontsize=8)
    right.set_xlim(-0.5, size - 0.5)
    right.set_ylim(0, max([1e-3] + [curve[t] for t in xs]) * 1.15)
    right.set_ylabel("mean Jaccard with earlier tasks")
    right.set_title(f"middle layer ({results.jaccard['middle_block']})", fontsize=9)
    _save(fig, path)
    return matrix, curve


def bwt_profile(results: RunResults) -> list[float]:
    """For each task j: a[T][j] − a[j][j], in % (0 for the last task). Not for MTL (`RunResults.joint`)."""
    a = results.accuracy_matrix
    last = len(a) - 1
    return [100.0 * (a[last][j] - a[j][j]) for j in range(len(a))]


def bwt_radar(runs: list[tuple[str, RunResults]], path: Path) -> dict[str, list[float]]:
    """A polar chart of the BWT profile, one trace per run (runs of the same task order). Runs without a BWT (MTL,
    `RunResults.joint`) are left out; with none left, nothing is drawn (no file) and {} is returned."""
    runs = [(label, results) for label, results in runs if not results.joint]
    if not runs:
        return {}
    tasks = runs[0][1].tasks
    profiles = {label: bwt_profile(results) for label, results in runs}
    angles = [2 * math.pi * j / len(tasks) for j in range(len(tasks))]
    values = [v for profile in profiles.values() for v in profile]
    low, high = min(min(values), 0.0), max(max(values), 0.0)
    margin = max(1.0, 0.1 * (high - low))
    fig, ax = plt.subplots(figsize=(5.5, 5.0), subplot_kw={"projection": "polar"})
    for label, profile in profiles.items():
        ax.plot(angles + angles[:1], profile + profile[:1], marker="o", markersize=3, label=label)
    ax.plot(np.linspace(0, 2 * math.pi, 100), np.zeros(100), color="grey", linestyle=":", linewidth=1)
    ax.set_ylim(low - margin, high + margin)
    ax.set_xticks(angles, tasks, fontsize=8)
    ax.set_rlabel_position(180 / len(tasks))
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("BWT profile: a[T][j] − a[j][j] (%)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.35, 1.1))
    _save(fig, path)
    return profiles


def grid_lambdas(records: list[StageRecord], path: Path) -> dict:
    """Left: λ chosen per task (log scale; task 1 trains with λ = 0 and is not drawn); right: the mean dev accuracy
    over the seen tasks of every trial that trained its whole task against its λ (a λ search's trials stopped early
    are in `lambda_profile`), a line per task, the chosen trial starred."""
    chosen = {r.task_name: r.selected_lam for r in records}
    trials = {r.task_name: [(c.lam, 100.0 * c.dev_mean) for c in r.trials if c.dev_mean is not None] for r in records}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    positive = [(i, r) for i, r in enumerate(records) if r.selected_lam > 0]
    left.plot([i for i, _ in positive], [r.selected_lam for _, r in positive], marker="o")
    left.set_yscale("log")
    left.set_xticks(range(len(records)), [f"{r.task}:{r.task_name}" for r in records], rotation=45,
                    ha="right", fontsize=8)
    left.set_ylabel("λ chosen")
    left.set_title("λ chosen per task (task 1: λ = 0)", fontsize=9)
    for record in records:
        points = [(lam, dev) for lam, dev in trials[record.task_name] if lam > 0]
        if not points:
            continue
        (line,) = right.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                             label=record.task_name)
        best = record.chosen
        right.plot([best.lam], [100.0 * best.dev_mean], marker="*", markersize=12, color=line.get_color())
    right.set_xscale("log")
    right.set_xlabel("λ")
    right.set_ylabel("mean dev accuracy over tasks 1..t (%)")
    right.set_title("every trial (★ chosen)", fontsize=9)
    if right.lines:
        right.legend(fontsize=7)
    _save(fig, path)
    return {"chosen": chosen, "trials": trials}


def lambda_profile(title: str, points: list[dict], path: Path) -> dict[str, list]:
    """One stage of a λ grid or search: the mean dev accuracy over the seen tasks against λ (log scale), with its
    past-task part (tasks 1..t−1) and current-task part (task t); the chosen λ starred; each mean with a bar of ± one
    standard error of its paired difference to the best (`selection.standings`) and a line at the best mean: a λ
    whose bar reaches that line is within one SE of the best, the report's `=`. `points`: one per trial, {"lam",
    "mean", "past", "current", "end", "selected", "se"} (`se`: a fraction, or None: no bar); a trial that did not
    train to the end (`end` False: a search cut it) is drawn hollow, at its last evaluation."""
    points = sorted(points, key=lambda p: p["lam"])
    lams = [p["lam"] for p in points]
    lines = {key: [math.nan if p[key] is None else 100.0 * p[key] for p in points]
             for key in ("mean", "past", "current")}
    ses = [None if p.get("se") is None else 100.0 * p["se"] for p in points]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    best = max(lines["mean"])
    ax.axhline(best, color="grey", linestyle="-.", linewidth=0.8, label="the best mean")
    barred = [(lam, mean, se) for lam, mean, se in zip(lams, lines["mean"], ses, strict=True) if se is not None]
    if barred:
        ax.errorbar([b[0] for b in barred], [b[1] for b in barred], yerr=[b[2] for b in barred], fmt="none",
                    ecolor="C0", elinewidth=0.8, capsize=3,
                    label="± one SE of the difference to the best (reaching its line: within one SE)")
    styles = {"mean": ("-", "o", "C0", "mean over tasks 1..t"), "past": ("--", "s", "C1", "past tasks 1..t−1"),
              "current": (":", "^", "C2", "current task t")}
    for key, (line_style, marker, color, label) in styles.items():
        ax.plot(lams, lines[key], linestyle=line_style, color=color, label=label)
        for lam, value, point in zip(lams, lines[key], points, strict=True):
            ax.plot([lam], [value], marker=marker, color=color, markersize=5,
                    markerfacecolor=color if point["end"] else "none")
    chosen = [(p["lam"], 100.0 * p["mean"]) for p in points if p["selected"]]
    ax.plot([c[0] for c in chosen], [c[1] for c in chosen], marker="*", markersize=13, linestyle="none",
            color="C0", label="chosen")
    ax.set_xscale("log")
    ax.set_xlabel("λ")
    ax.set_ylabel("dev accuracy (%)")
    cut = [p for p in points if not p["end"]]
    ax.set_title(title + (" · hollow: stopped early, last rung on the rung subset" if cut else ""), fontsize=9)
    ax.legend(fontsize=7, loc="best")
    _save(fig, path)
    return {"lambda": lams, **lines, "se": ses}


def run_plots(results: RunResults, run_dir: Path) -> None:
    """The figures of one continual run, written into its run directory (by `jumplora.outputs.write_run`)."""
    accuracy_heatmap(results, run_dir / HEATMAP)
    sparsity_by_layer(results, run_dir / SPARSITY)
    overlap(results, run_dir / OVERLAP)
    if not results.joint:  # MTL has no BWT, so no radar
        bwt_radar([(f"{results.method} seed {results.seed}", results)], run_dir / BWT_RADAR)
