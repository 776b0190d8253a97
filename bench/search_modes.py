"""The bench section `search` (`python bench/run_all.py --sections search`): the λ grid against the halving search.

On the synthetic benchmark with the tiny preset (the smoke preset with `--search-train` training examples a task and
every dev / test example), for order 1 and the LS order 4 cut to its first 6 tasks, for each seed of `--search-seeds`,
`grid_lambda.py` runs both searches, grid then halving, each in its own process with its own local Ray and the same
trial resources (`--cpus-per-worker`, so that a stage's 6 λ run at once in both). Per order and seed:
- the λ each chose per stage: the same; or another one whose dev accuracy in the *grid's* trials is within noise of
  the grid's choice (one binomial standard error, √(p (1 − p) / n) for the grid's best dev mean p on the n dev
  examples of the seen tasks: a tie, not a miss); or a miss; after the first stage where they differ the two runs
  start from other models, so the later stages are compared by λ only (`after a difference`);
- the final test OA, BWT and FWT of both, and their OA difference;
- the optimizer steps and evaluated (dev + test) examples of both, counted by the workers (the stage records);
- the wall time of the stages that ran in one attempt in both searches (a stage resumed after an interruption, a
  Ray out-of-memory kill on the shared machine for example, has its last attempt's seconds only).
Every run joins one local Ray of 2 CPUs that the section starts (no dashboard: a second process tree per run costs
the shared machine about a GiB). Grids already in `--search-storage` are not run again (the same `--name` resumes),
so an interrupted bench goes on.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora.results import read_results  # noqa: E402

MODES = ("grid", "halving")
ORDERS = {"order1": ("1", None), "ls6": ("4", 6)}  # order 1 (4 tasks); LS order 4 cut to its first 6 tasks
TARGET_STEPS, TARGET_OA_SEED, TARGET_OA_MEAN = 0.5, 1.0, 0.5


def grid_name(key: str, seed: int, mode: str) -> str:
    return f"{key}-seed{seed}-{mode}"


def run_one(args, key: str, seed: int, mode: str, env: dict[str, str]) -> dict:
    order, tasks = ORDERS[key]
    name = grid_name(key, seed, mode)
    folder = args.search_storage / name
    argv = ["--order", order, "--preset", "smoke", "--max-train-per-task", str(args.search_train),
            "--max-eval-per-task", "100", "--seed", str(seed), "--search", mode, "--cpus-per-worker",
            str(args.search_cpus), "--cache-dir", str(args.cache_dir), "--storage-path", str(args.search_storage),
            "--name", name, "--no-tracking", *(["--max-tasks", str(tasks)] if tasks else [])]
    if not (folder / "run" / "results.json").exists():
        with (args.search_storage / f"{name}.log").open("a") as log:  # a resumed run adds to it
            subprocess.run([sys.executable, str(ROOT / "ray_jobs" / "grid_lambda.py"), *argv], check=True, cwd=ROOT,
                           stdout=log, stderr=subprocess.STDOUT, env=env)
    return read_run(folder)


def read_run(folder: Path) -> dict:
    """A finished grid of the bench: its stages, final metrics, work and the seconds of the stages run in one attempt
    (one Tune experiment state in the stage's folder)."""
    stages = json.loads((folder / "manifest.json").read_text())["stages"]
    results = read_results(folder / "run" / "results.json")
    once = {s["task"]: s["seconds"] for s in stages
            if len(list((folder / f"task{s['task']:02d}").glob("experiment_state*.json"))) == 1}
    return {"stages": stages, "oa": results.oa, "bwt": results.bwt, "fwt": results.fwt, "seconds": once,
            "steps": sum(s["work"]["steps"] for s in stages),
            "evaluated": sum(s["work"]["dev_examples"] + s["work"]["test_examples"] for s in stages),
            "lambdas": results.lambdas}


def verdicts(grid: dict, halving: dict) -> list[str]:
    """Per stage t ≥ 2: `same`, `tie` (within the noise of the grid's dev means), `miss`, or, once an earlier stage
    differed, `same λ, other start` / `other λ, other start`."""
    found, diverged = [], False
    for ours, theirs in zip(halving["stages"][1:], grid["stages"][1:], strict=True):
        same = ours["selected_lam"] == theirs["selected_lam"]
        if diverged:
            found.append("same λ, other start" if same else "other λ, other start")
            continue
        if same:
            found.append("same")
            continue
        by_lam = {trial["lam"]: trial["dev_mean"] for trial in theirs["trials"]}
        best = by_lam[theirs["selected_lam"]]
        n_dev = 64 * theirs["task"]  # the synthetic benchmark: 64 dev examples a task
        noise = math.sqrt(best * (1 - best) / n_dev)
        found.append("tie" if best - by_lam[ours["selected_lam"]] <= noise else "miss")
        diverged = True
    return found


def run(args) -> dict:
    """Both searches for every order and seed (`--search-modes grid` runs the grids alone: the halving layout does
    not change them, so they can run while it is being measured; the table needs both)."""
    import ray  # here: the other sections (and bench/gpu_checks.py, which imports run_all) run without Ray

    args.search_storage.mkdir(parents=True, exist_ok=True)
    runs = {}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
        for key in ORDERS:
            for seed in args.search_seeds:
                for mode in args.search_modes:  # grid then halving, seed after seed: the same stretch of load
                    runs[grid_name(key, seed, mode)] = run_one(args, key, seed, mode, env)
                    print(f"[search] {grid_name(key, seed, mode)} done", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    both = tuple(args.search_modes) == MODES  # a comparison needs both searches
    rows = [compare(key, seed, *(runs[grid_name(key, seed, mode)] for mode in MODES))
            for key in ORDERS for seed in args.search_seeds] if both else []
    return {"train_per_task": args.search_train, "seeds": args.search_seeds, "cpus_per_trial": args.search_cpus,
            "rows": rows}


def compare(key: str, seed: int, grid: dict, halving: dict) -> dict:
    """One order and seed: the verdicts, both searches' metrics and work, and the seconds of the stages that ran in
    one attempt in both."""
    both = sorted(grid["seconds"].keys() & halving["seconds"].keys())
    return {"order": key, "seed": seed, "verdicts": verdicts(grid, halving), "timed_stages": both,
            **{f"{mode}_{field}": run[field] for mode, run in (("grid", grid), ("halving", halving))
               for field in ("oa", "bwt", "fwt", "steps", "evaluated", "lambdas")},
            **{f"{mode}_seconds": sum(run["seconds"][t] for t in both) for mode, run in (("grid", grid),
                                                                                        ("halving", halving))}}


def report(section: dict) -> list[str]:
    rows = section["rows"]
    if not rows:
        return ["search: only one search ran (--search-modes): no comparison"]
    lines = [f"search: grid vs halving, synthetic benchmark, tiny preset, {section['train_per_task']} training "
             f"examples a task, seeds {section['seeds']}, {section['cpus_per_trial']} CPU a trial",
             "| order | seed | λ grid | λ halving | stages: same / tie / miss / after a difference | OA grid | "
             "OA halving | ΔOA | BWT grid / halving | FWT grid / halving | steps grid / halving | evaluated grid / "
             "halving | stage seconds grid / halving (stages timed) |", "|" + "---|" * 13]
    for r in rows:
        v = r["verdicts"]
        after = sum(x.endswith("other start") for x in v)
        lines.append(
            f"| {r['order']} | {r['seed']} | {' '.join(f'{x:g}' for x in r['grid_lambdas'][1:])} | "
            f"{' '.join(f'{x:g}' for x in r['halving_lambdas'][1:])} | {v.count('same')} / {v.count('tie')} / "
            f"{v.count('miss')} / {after} ({v.count('same λ, other start')} same λ) | {r['grid_oa']:.2f} | "
            f"{r['halving_oa']:.2f} | {r['halving_oa'] - r['grid_oa']:+.2f} | {r['grid_bwt']:.2f} / "
            f"{r['halving_bwt']:.2f} | {r['grid_fwt']:.2f} / {r['halving_fwt']:.2f} | {r['grid_steps']:,} / "
            f"{r['halving_steps']:,} ({100 * r['halving_steps'] / r['grid_steps']:.0f} %) | {r['grid_evaluated']:,} / "
            f"{r['halving_evaluated']:,} | {r['grid_seconds']:.0f} / {r['halving_seconds']:.0f} "
            f"({len(r['timed_stages'])}) |")
    every = [x for r in rows for x in r["verdicts"]]
    same = every.count("same") + every.count("same λ, other start")
    steps = sum(r["halving_steps"] for r in rows) / sum(r["grid_steps"] for r in rows)
    deltas = [r["halving_oa"] - r["grid_oa"] for r in rows]
    means = {key: statistics.mean(r["halving_oa"] - r["grid_oa"] for r in rows if r["order"] == key)
             for key in ORDERS}
    lines += [
        f"same λ in {same} of {len(every)} stages; of the others {every.count('tie')} within the noise of the grid's "
        f"dev means, {every.count('miss')} beyond it, {every.count('other λ, other start')} after an earlier "
        f"difference (another start: not comparable)",
        f"  halving runs {100 * steps:.0f} % of the grid's optimizer steps (target ≤ {100 * TARGET_STEPS:.0f} %: "
        f"{'met' if steps <= TARGET_STEPS else 'NOT met'}); wall time of the stages timed in both, halving / grid: "
        f"{ratio(rows)}",
        f"  final test OA, halving − grid: {' '.join(f'{d:+.2f}' for d in deltas)} (target |Δ| ≤ {TARGET_OA_SEED} on "
        f"every seed: {'met' if all(abs(d) <= TARGET_OA_SEED for d in deltas) else 'NOT met'}); mean over seeds "
        + ", ".join(f"{key} {m:+.2f}" for key, m in means.items())
        + f" (target |mean| ≤ {TARGET_OA_MEAN}: "
        f"{'met' if all(abs(m) <= TARGET_OA_MEAN for m in means.values()) else 'NOT met'})"]
    return lines


def ratio(rows: list[dict]) -> str:
    """Per order and seed, halving's seconds over the grid's on the stages timed in both: min / median / max."""
    values = sorted(r["halving_seconds"] / r["grid_seconds"] for r in rows if r["grid_seconds"])
    if not values:
        return "n/a"
    return f"{values[0]:.2f} / {statistics.median(values):.2f} / {values[-1]:.2f} (min / median / max)"
