"""What the method is for, side by side (`make demo`): for each run directory given, its λ per task, the test
accuracy of the order's first task after each task (how much of it is forgotten as later tasks arrive), BWT and OA.

    python examples/forgetting.py RUN_DIR [RUN_DIR ...]   # e.g. a plain-LoRA run and a λ grid's run/

Reads each directory's results.json (`jumplora.results.read_results`); prints one Markdown table."""

from __future__ import annotations

import sys
from pathlib import Path

from jumplora.outputs import RESULTS
from jumplora.results import read_results
from jumplora.tables import markdown


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def table(run_dirs: list[Path]) -> str:
    runs = [read_results(Path(run_dir) / RESULTS) for run_dir in run_dirs]
    tasks = runs[0].tasks
    if any(run.tasks != tasks for run in runs):
        raise SystemExit("error: the runs trained different task orders: compare runs of one order")
    header = ["", *(f"{run.config['method']} ({Path(d).name})" for run, d in zip(runs, run_dirs, strict=True))]
    rows = [["λ per task", *(" ".join(f"{lam:g}" for lam in run.lambdas) for run in runs)]]
    rows += [[f"{tasks[0]} (task 1) after task {t + 1} {tasks[t]}", *(pct(run.accuracy_matrix[t][0]) for run in runs)]
             for t in range(len(tasks))]
    rows += [["BWT (points)", *(f"{run.bwt:.2f}" if run.bwt is not None else "–" for run in runs)],
             ["OA (%)", *(f"{run.oa:.2f}" for run in runs)]]
    return markdown(header, rows)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    print(f"Forgetting of task 1 (test accuracy %, after each task of the order) and BWT:\n{table(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main([Path(a) for a in sys.argv[1:]]))
