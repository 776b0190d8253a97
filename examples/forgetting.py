"""What the method is for, side by side (`make demo`): for each run directory given, its λ per task, the test
accuracy of the order's first task after each task (how much of it is forgotten as later tasks arrive), beside it
the diagonal (each task's accuracy right after it was learned: a task never learned cannot be forgotten), the
learning accuracy (the diagonal's mean), BWT, OA and FWT (with --single-task-baselines), each with its 95 % interval;
then each run after the first compared with the first (the reference, e.g. plain LoRA) on the same test examples: the
difference of BWT, of the learning accuracy and of OA, its paired interval and a sentence saying whether the
difference is real or within noise at this size (`jumplora.uncertainty`), and where a run forgets less but learned
less, a sentence naming the tasks it learned less: a trade-off, not a gain (`uncertainty.trade_off`). Each run
directory is one training run, so the sentences say that they hold on these test examples, for this one training run:
the training's own noise (its seed and order) is in none of them. The comparisons are one family: each interval is at
1 − 0.05 / k for k comparisons (Bonferroni), and the heading says k.

    python examples/forgetting.py REFERENCE_RUN_DIR RUN_DIR [RUN_DIR ...]   # e.g. plain LoRA, then a λ grid's run/

Reads each directory's results.json (`jumplora.results.read_results`); prints one Markdown table and the sentences.
Bad input (fewer than two directories, one without a readable results.json, runs of other orders or test examples, a
path the operating system refuses) is one line on stderr and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

from jumplora import flags, uncertainty
from jumplora.errors import JumpLoRAError, entry_point
from jumplora.outputs import RESULTS
from jumplora.results import RunResults, read_results
from jumplora.tables import markdown

COMPARED = ("bwt", "la", "oa")
# the table's metric rows: results.json's name → its label
METRIC_ROWS = {"la": "learning accuracy (%): mean of the diagonal", "bwt": "BWT (points)", "oa": "OA (%)",
               "fwt": "FWT (points): diagonal − a0 own"}


def cell_text(run: RunResults, t: int, j: int = 0) -> str:
    """Task j's test accuracy after training t (percent; default task 1), with its Wilson interval where the run kept
    flags."""
    value = run.accuracy_matrix[t][j]
    if value is None:
        return "–"
    interval = f" {uncertainty.cell_interval(flags.unpack(run.test_flags[t][j])).text(100)}" if run.test_flags else ""
    return f"{100 * value:.1f}{interval}"


def metric_text(run: RunResults, metric: str) -> str:
    value = run.learning_accuracy() if metric == "la" else getattr(run, metric)
    if value is None:
        return "–" if metric != "fwt" else "– (run with --single-task-baselines)"
    intervals = uncertainty.intervals_of(run)
    interval = intervals.metrics.get(metric) if intervals is not None else None
    return f"{value:.2f}" + ("" if interval is None else f" {interval.text()}")


def table(runs: list[RunResults], names: list[str]) -> str:
    tasks = runs[0].tasks
    rows = [["λ per task", *(" ".join(f"{lam:g}" for lam in run.lambdas) for run in runs)]]
    rows += [[f"{tasks[0]} (task 1) after task {t + 1} {tasks[t]}", *(cell_text(run, t) for run in runs)]
             for t in range(len(tasks))]
    rows += [[f"task {t + 1} {tasks[t]} right after it was learned", *(cell_text(run, t, t) for run in runs)]
             for t in range(len(tasks))]
    rows += [[label, *(metric_text(run, metric) for run in runs)] for metric, label in METRIC_ROWS.items()]
    return markdown(["", *names], rows)


def sentences(runs: list[RunResults], names: list[str]) -> tuple[int, list[str]]:
    """Each run after the first against the first, per metric of `COMPARED` (`uncertainty.compare`), one family
    (`uncertainty.in_family`): how many comparisons give a verdict, and the lines."""
    kept = [uncertainty.RunFlags.of(run) for run in runs]
    if kept[0] is None:
        return 0, [f"no comparison: {names[0]} has {uncertainty.NO_FLAGS}"]
    found: list[tuple[str, uncertainty.RunFlags | None, uncertainty.Comparison | str]] = []
    for name, other in zip(names[1:], kept[1:], strict=True):
        if other is None:
            found.append((name, None, f"no comparison: {name} has {uncertainty.NO_FLAGS}"))
            continue
        found += [(name, other, compared) for metric in COMPARED
                  if (compared := uncertainty.compare([kept[0]], [other], metric)) is not None]
    family = iter(uncertainty.in_family([c for _, _, c in found if not isinstance(c, str)]))
    placed = [(name, other, entry if isinstance(entry, str) else next(family)) for name, other, entry in found]
    k = sum(not isinstance(c, str) and c.refused is None for _, _, c in placed)
    lines = []
    for index, (name, other, entry) in enumerate(placed):
        lines.append(entry if isinstance(entry, str) else entry.sentence(name, names[0]))
        if other is not None and (index + 1 == len(placed) or placed[index + 1][0] != name):  # the run's last
            by_metric = {c.metric: c for n, _, c in placed if n == name and not isinstance(c, str)}
            said = uncertainty.trade_off([kept[0]], [other], by_metric.get("bwt"), by_metric.get("la"), name,
                                         names[0])
            lines += [said] if said else []
    return k, lines


def read(run_dir: Path) -> RunResults:
    if not (run_dir / RESULTS).is_file():
        raise JumpLoRAError(f"{run_dir} holds no {RESULTS}: pass the directory of a finished run")
    return read_results(run_dir / RESULTS)


def main(argv: list[str | Path]) -> int:
    """The table and the sentences of the run directories `argv`, inside every entry point's boundary
    (`jumplora.errors.entry_point`): bad input, a path the operating system refuses included, is one line and exit
    code 2, never a traceback."""
    return entry_point(lambda: compare([Path(run_dir) for run_dir in argv]), "forgetting.py", "error: ",
                       "interrupted: nothing was written")


def compare(run_dirs: list[Path]) -> int:
    if len(run_dirs) < 2:
        usage = next(line.strip() for line in __doc__.splitlines() if line.startswith("    python"))
        raise JumpLoRAError(f"give at least two run directories, the reference first: {usage}")
    runs = [read(run_dir) for run_dir in run_dirs]
    if any(run.tasks != runs[0].tasks for run in runs):
        raise JumpLoRAError("the runs trained different task orders: compare runs of one order")
    names = [f"{run.method} ({run_dir.name})" for run, run_dir in zip(runs, run_dirs, strict=True)]
    try:
        k, lines = sentences(runs, names)
    except ValueError as error:  # `uncertainty.compare`: runs not evaluated on the same test examples
        raise JumpLoRAError(str(error)) from None
    notes = [uncertainty.NO_FLAGS if any(run.intervals is None for run in runs) else uncertainty.NOTE]
    print("Forgetting of task 1 (test accuracy %, after each task of the order), each task right after it was "
          f"learned (the diagonal: plasticity), learning accuracy, BWT, OA and FWT:\n{table(runs, names)}")
    family = f" ({uncertainty.family_text(k)})" if any(not line.startswith("no comparison") for line in lines) else ""
    print("\n".join([*notes, "", f"Compared with {names[0]} on the same test examples{family}:", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
