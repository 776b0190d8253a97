"""OA / BWT / FWT of every method on one order of the synthetic benchmark with the tiny preset: the paper's table,
with the reference baselines, as the tiny model ranks them (reported, not tuned).

    python bench/method_table.py [--order 4] [--seed 42] [--max-train-per-task 320] [--max-eval-per-task 64]
                                 [--methods inclora,ella,...] [--single-task-baselines] [--model tiny|tiny-causal]
                                 [--cache-dir runs/cache]

Each method runs the library's loop in this process with its paper configuration for the benchmark
(search_spaces/methods.yaml) and `--lambdas paper`; with `--single-task-baselines` a0 (every task alone, cached)
gives FWT and FWT last row. MTL has one row: OA only. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora import spaces  # noqa: E402
from jumplora.config import RunConfig  # noqa: E402
from jumplora.continual import prepare, run_continual, single_task_baselines, summarise  # noqa: E402
from jumplora.data.tasks import BENCHMARK_ORDERS  # noqa: E402
from jumplora.methods import METHODS, get_method  # noqa: E402


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-train-per-task", type=int, default=320)
    parser.add_argument("--max-eval-per-task", type=int, default=64)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--single-task-baselines", action="store_true", help="also a0, for FWT")
    parser.add_argument("--model", default="tiny", help="tiny or tiny-causal")
    parser.add_argument("--cache-dir", type=Path, default=Path("runs/cache"))
    args = parser.parse_args()
    benchmark = next(name for name, orders in BENCHMARK_ORDERS.items() if args.order in orders)
    configurations = spaces.methods_file()["methods"]
    rows = []
    for method in args.methods.split(","):
        start = time.perf_counter()
        config = RunConfig(order=args.order, method=method, seed=args.seed, max_train_per_task=args.max_train_per_task,
                           max_eval_per_task=args.max_eval_per_task, model=args.model,
                           **configurations[method][benchmark])
        ws = prepare(config, args.cache_dir, progress=False)
        base_state = {k: v.detach().clone() for k, v in ws.model.state_dict().items()}
        state = run_continual(ws, progress=False)
        wanted = args.single_task_baselines and not get_method(method).joint
        baselines = single_task_baselines(ws, base_state, args.cache_dir, False) if wanted else None
        results = summarise(ws, state, baselines)
        rows.append((method, results, time.perf_counter() - start))
        print(f"{method}: OA {cell(results.oa)} BWT {cell(results.bwt)} ({rows[-1][2]:.0f} s)", flush=True)
    print(f"\norder {args.order}, seed {args.seed}, {args.max_train_per_task} train / {args.max_eval_per_task} eval "
          f"examples per task, {args.model} preset, synthetic benchmark\n")
    print("| method | OA | BWT | FWT | FWT last row | wall s |\n|---|---|---|---|---|---|")
    for method, results, seconds in sorted(rows, key=lambda row: -row[1].oa):
        print(f"| {method} | {cell(results.oa)} | {cell(results.bwt)} | {cell(results.fwt)} | "
              f"{cell(results.fwt_last_row)} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
