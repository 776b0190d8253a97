"""The λ grid, lean (each trial evaluates the dev sets; the chosen trial's test row once per stage) vs testing every
trial (`--test-all-trials`, the way before): evaluated examples and wall time per stage, and the plan's totals.

    python bench/grid_lean.py [--repeats 2] [--tasks 3] [--grid 1,1e3,1e5] [--data-dir ../shared/data/CL_Benchmark]

1. The order-4 plan of the paper preset on the real data (`--data-dir`; counts only, nothing runs), lean vs all.
2. Smoke-preset grids of order 1 (first `--tasks` tasks, `--grid` λ), each in its own process with its own local
   Ray, lean and all alternately (`--repeats` each, so both see the same machine load): per stage, the evaluated
   examples (dev + test, from the plan) and the stage's wall time from the manifest, min / median / max.
Not part of `make test`. The machine's load (`os.getloadavg`) is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora import spaces, tables  # noqa: E402
from jumplora.config import LAMBDA_GRID, RunConfig  # noqa: E402
from jumplora.storage import MANIFEST  # noqa: E402
from ray_jobs import costs, grid, grid_plan  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "CL_Benchmark"
MODES = {"lean": [], "all": ["--test-all-trials"]}


def plan_costs(config: RunConfig, n_tasks: int | None, grid_values: list[float], cache_dir: Path,
               test_all: bool) -> list[costs.Cost]:
    tasks = grid.jobs.check(config, 1)[:n_tasks]
    return grid_plan.plan_costs(grid.jobs.Job(config, str(cache_dir)), grid.plan(tasks, grid_values), test_all)


def order4_plan(data_dir: Path, cache_dir: Path) -> None:
    config = RunConfig(order=4, data_dir=str(data_dir), lambdas=[0.0] * 4, **spaces.preset("paper"))
    lean, every = (plan_costs(config, None, spaces.lambda_grid(), cache_dir, test_all) for test_all in (False, True))
    total_lean, total_all = sum(lean, costs.Cost()), sum(every, costs.Cost())
    print("order 4, paper preset, real data: evaluated examples (dev + test) per stage, lean vs every trial tested")
    rows = [[i + 1, f"{a.dev_examples + a.test_examples:,}", f"{b.dev_examples + b.test_examples:,}",
             f"{a.train_examples:,}"] for i, (a, b) in enumerate(zip(lean, every, strict=True))]
    rows.append(["total", f"{total_lean.dev_examples + total_lean.test_examples:,}",
                 f"{total_all.dev_examples + total_all.test_examples:,}", f"{total_lean.train_examples:,}"])
    print(tables.markdown(["stage", "evaluated, lean", "evaluated, all tested", "trained"], rows))
    saved = 1 - (total_lean.dev_examples + total_lean.test_examples) / (total_all.dev_examples +
                                                                         total_all.test_examples)
    print(f"lean evaluates {100 * saved:.1f} % fewer examples\n")


def run_grid(mode: str, storage: Path, cache_dir: Path, n_tasks: int, grid_text: str, name: str) -> list[float]:
    argv = ["--order", "1", "--preset", "smoke", "--max-tasks", str(n_tasks), "--grid", grid_text, "--cache-dir",
            str(cache_dir), "--storage-path", str(storage), "--name", name, *MODES[mode]]
    subprocess.run([sys.executable, str(ROOT / "ray_jobs" / "grid_lambda.py"), *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return [stage["seconds"] for stage in json.loads((storage / name / MANIFEST).read_text())["stages"]]


def spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--grid", default="1,1e3,1e5")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "cache")
    args = parser.parse_args()
    cache_dir = args.cache_dir.resolve()
    if args.data_dir.exists():
        order4_plan(args.data_dir, cache_dir)
    smoke = RunConfig(order=1, lambdas=[0.0] * 4, **spaces.preset("smoke"))
    grid_values = LAMBDA_GRID(args.grid)
    planned = {mode: plan_costs(smoke, args.tasks, grid_values, cache_dir, mode == "all") for mode in MODES}
    seconds = {mode: [] for mode in MODES}
    load = [round(v, 2) for v in os.getloadavg()]
    with tempfile.TemporaryDirectory() as storage:
        for repeat in range(args.repeats):
            for mode in MODES:
                seconds[mode].append(run_grid(mode, Path(storage), cache_dir, args.tasks, args.grid,
                                              f"{mode}-{repeat}"))
    print(f"smoke grid, order 1, {args.tasks} tasks, λ {args.grid}; {args.repeats} run(s) each; load "
          f"{load} → {[round(v, 2) for v in os.getloadavg()]}")
    rows = []
    for i in range(args.tasks):
        lean, every = ([run[i] for run in seconds[mode]] for mode in MODES)
        rows.append([i + 1, planned["lean"][i].dev_examples + planned["lean"][i].test_examples,
                     planned["all"][i].dev_examples + planned["all"][i].test_examples, spread(lean), spread(every),
                     f"{statistics.median(lean) / statistics.median(every):.2f}"])
    totals = {mode: [sum(run) for run in seconds[mode]] for mode in MODES}
    rows.append(["total", sum(r[1] for r in rows), sum(r[2] for r in rows), spread(totals["lean"]),
                 spread(totals["all"]), f"{statistics.median(totals['lean']) / statistics.median(totals['all']):.2f}"])
    print(tables.markdown(["stage", "evaluated, lean", "evaluated, all tested", "seconds lean (min/med/max)",
                           "seconds all tested", "time ratio lean/all"], rows))


if __name__ == "__main__":
    main()
