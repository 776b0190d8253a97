"""What the method is for, side by side (`make demo`): for each run directory given, its λ per task, the test
accuracy of the order's first task after each task (how much of it is forgotten as later tasks arrive), beside it
the diagonal (each task's accuracy right after it was learned: a task never learned cannot be forgotten), the
learning accuracy (the diagonal's mean), BWT, OA and FWT (with --single-task-baselines), each with its 95 % interval;
then each run after the first compared with the first (the reference, e.g. plain LoRA) on the same test examples: the
difference of BWT, of the learning accuracy and of OA, its paired interval and a sentence saying whether the
difference is real or within noise at this size (`jumplora.uncertainty`), and where a run forgets less but learned
less, a sentence naming the tasks it learned less: a trade-off, not a gain (`uncertainty.trade_off`). A run directory
is one training run, so its sentences say that they hold on these test examples, for this one training run: the
training's own noise (its seed and order) is in none of them. A folder of runs, one per seed (a λ grid of several
seeds' `runs/`, `runs/seed<S>/` each) is one arm over its seeds: a column per seed, its comparisons over the seeds,
paired by seed with the reference's (which must have run the same seeds). The comparisons are one family: each
interval is at 1 − 0.05 / k for k comparisons (Bonferroni), and the heading says k.

    python examples/forgetting.py REFERENCE_RUN_DIR RUN_DIR [RUN_DIR ...]   # e.g. plain LoRA, then a λ grid's run/
    python examples/forgetting.py REFERENCE_RUNS/ GRID/runs/                  # seed<S>/ runs of each, over the seeds

Reads each directory's results.json (`jumplora.results.read_results`); prints one Markdown table and the sentences.
Bad input (fewer than two directories, one without a readable results.json, runs of other orders or test examples, a
path the operating system refuses) is one line on stderr and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

from jumplora import flags, uncertainty
from jumplora.errors import JumpLoRAError, entry_point
from jumplora.outputs import RESULTS
from jumplora.results import Needs, RunResults, read_results
from jumplora.tables import markdown

COMPARED = ("bwt", "la", "oa")
# what the table reads of each run besides what every results.json holds
TABLED = Needs("examples/forgetting.py", ("tasks", "lambdas", "accuracy_matrix"))
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


def sentences(arms: list[list[RunResults]], names: list[str]) -> tuple[int, list[str]]:
    """Each arm after the first against the first, per metric of `COMPARED` (`uncertainty.compare`, over the arms'
    seeds, paired by seed), one family (`uncertainty.in_family`): how many comparisons give a verdict, and the
    lines."""
    kept = [[uncertainty.RunFlags.of(run) for run in arm] for arm in arms]
    if None in kept[0]:
        return 0, [f"no comparison: {names[0]} has {uncertainty.NO_FLAGS}"]
    seeds = [run.seed for run in arms[0]]
    found: list[tuple[str, list[uncertainty.RunFlags] | None, uncertainty.Comparison | str]] = []
    for name, arm, other in zip(names[1:], arms[1:], kept[1:], strict=True):
        if None in other:
            found.append((name, None, f"no comparison: {name} has {uncertainty.NO_FLAGS}"))
            continue
        if [run.seed for run in arm] != seeds:
            raise JumpLoRAError(f"{name} ran seeds {', '.join(str(run.seed) for run in arm)}, {names[0]} seeds "
                                f"{', '.join(map(str, seeds))}: compare runs of the same seeds")
        found += [(name, other, compared) for metric in COMPARED
                  if (compared := uncertainty.compare(kept[0], other, metric, seeds)) is not None]
    family = iter(uncertainty.in_family([c for _, _, c in found if not isinstance(c, str)]))
    placed = [(name, other, entry if isinstance(entry, str) else next(family)) for name, other, entry in found]
    k = sum(not isinstance(c, str) and c.refused is None for _, _, c in placed)
    lines = []
    for index, (name, other, entry) in enumerate(placed):
        lines.append(entry if isinstance(entry, str) else entry.sentence(name, names[0]))
        if other is not None and (index + 1 == len(placed) or placed[index + 1][0] != name):  # the run's last
            by_metric = {c.metric: c for n, _, c in placed if n == name and not isinstance(c, str)}
            said = uncertainty.trade_off(kept[0], other, by_metric.get("bwt"), by_metric.get("la"), name,
                                         names[0])
            lines += [said] if said else []
    return k, lines


def read_arm(run_dir: Path) -> list[RunResults]:
    """The runs of one directory given, by seed: its own run, or the seeds' runs in its subdirectories (a λ grid of
    several seeds' `runs/`, each `seed<S>/` a run); one seed twice is refused."""
    if (run_dir / RESULTS).is_file() or not run_dir.is_dir():
        return [read(run_dir)]
    runs = sorted((read(sub) for sub in run_dir.iterdir() if (sub / RESULTS).is_file()), key=lambda run: run.seed)
    if not runs:
        raise JumpLoRAError(f"{run_dir} holds no {RESULTS}, nor folders of runs that do: pass the directory of a "
                            "finished run, or a folder of one run per seed (a λ grid's runs/)")
    seeds = [run.seed for run in runs]
    if len(set(seeds)) < len(seeds):
        raise JumpLoRAError(f"{run_dir} holds two runs of one seed: pass a folder of one run per seed")
    return runs


def read(run_dir: Path) -> RunResults:
    """A continual run's results (`read_results`, the schema every reader reads with): a joint method's run (MTL)
    trained once, so it has no row after each task to show forgetting in."""
    if not (run_dir / RESULTS).is_file():
        raise JumpLoRAError(f"{run_dir} holds no {RESULTS}: pass the directory of a finished run")
    run = read_results(run_dir / RESULTS, TABLED)
    if run.joint:
        raise JumpLoRAError(f"{run_dir} is a run of {run.method}, which trains once on all tasks: it forgets nothing "
                            "as tasks arrive; pass continual runs")
    return run


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
    arms = [read_arm(run_dir) for run_dir in run_dirs]
    runs = [run for arm in arms for run in arm]
    if any(run.tasks != runs[0].tasks for run in runs):
        raise JumpLoRAError("the runs trained different task orders: compare runs of one order")
    names = [f"{arm[0].method} ({run_dir.name})" for arm, run_dir in zip(arms, run_dirs, strict=True)]
    columns = [name if len(arm) == 1 else f"{name} seed {run.seed}" for name, arm in zip(names, arms, strict=True)
               for run in arm]
    try:
        k, lines = sentences(arms, names)
    except ValueError as error:  # `uncertainty.compare`: runs not evaluated on the same test examples
        raise JumpLoRAError(str(error)) from None
    notes = [uncertainty.NO_FLAGS if any(run.intervals is None for run in runs) else uncertainty.NOTE]
    print("Forgetting of task 1 (test accuracy %, after each task of the order), each task right after it was "
          f"learned (the diagonal: plasticity), learning accuracy, BWT, OA and FWT:\n{table(runs, columns)}")
    family = f" ({uncertainty.family_text(k)})" if any(not line.startswith("no comparison") for line in lines) else ""
    print("\n".join([*notes, "", f"Compared with {names[0]} on the same test examples{family}:", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
