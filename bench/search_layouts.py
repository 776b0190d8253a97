"""Which rungs, η and rung subset should `grid_lambda.py --search halving` use? Measured, not guessed.

    python bench/search_layouts.py record --order 1 --seed 0 [--max-tasks 6] [--out runs/bench/layouts-o1-s0.json]
    python bench/search_layouts.py analyse runs/bench/layouts-*.json [--target 0.5]

`record` runs the λ grid of one order and seed in this process with the library alone, as `grid_lambda.py` would
(the smoke preset with `--max-train-per-task`, `--max-eval-per-task`; every λ of a stage from the model the grid chose
at the stage before, the grid's choice by full dev accuracy), and reads each trial in the middle of its task at the
candidate rung fractions `FRACTIONS` (`training.Watch`: the model is read, nothing changes): the correctness of every
dev example of every seen task. `analyse` replays successive halving on those records for every layout (rung
fractions × η × rung subset size, the subset drawn as `continual.subset_indices` draws it) and ranks the layouts by
how often they choose the grid's λ and by the grid's dev accuracy they lose, among those that run at most `--target`
of the grid's optimizer steps (the whole grid: stage 1 and the single-task runs, which both searches run, included).

A miss is counted as a tie within noise when the grid's full dev accuracy of the λ halving chose is within one
binomial standard error, √(p (1 − p) / n) for the best λ's accuracy p on the n dev examples of the seen tasks, of the
best one. Not part of `make test`: about 20 CPU-minutes per (order, seed) at 1024 training examples a task.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora import selection, spaces, tables  # noqa: E402
from jumplora.config import RunConfig  # noqa: E402
from jumplora.continual import ContinualState, prepare, run_task, seen_tasks, subset_indices  # noqa: E402
from jumplora.data import order_tasks  # noqa: E402
from jumplora.evaluation import exact_match_flags  # noqa: E402
from jumplora.steps import Watch, steps_per_epoch  # noqa: E402
from ray_jobs.halving import Halving, planned_steps, survivors  # noqa: E402

FRACTIONS = (1 / 16, 1 / 9, 1 / 6, 1 / 4, 1 / 3, 1 / 2, 2 / 3)  # candidate rungs, read in every trial
ETAS = (2, 3, 4, 6)
SUBSETS = (8, 16, 32, 64)


def record(args) -> None:
    torch.set_num_threads(1)  # as a one-CPU Ray trial
    fields = {**spaces.preset("smoke"), "max_train_per_task": args.max_train_per_task,
              "max_eval_per_task": args.max_eval_per_task}
    grid = spaces.lambda_grid()
    lambdas = [0.0] * len(order_tasks(None, args.order))  # each stage sets the λ it tries
    config = RunConfig(order=args.order, seed=args.seed, max_tasks=args.max_tasks, lambdas=lambdas, **fields)
    ws = prepare(config, args.cache_dir, progress=False)
    started = time.perf_counter()
    state = ContinualState()
    run_task(ws, state, 0, progress=False, test=False)  # stage 1: task 1 with λ = 0
    stages = []
    for t in range(1, len(ws.tasks)):
        total = steps_per_epoch(len(ws.encoded[ws.tasks[t]]["train"]), config.batch_size)
        steps = list(Halving(FRACTIONS, 2, 1).rung_steps(total))
        start_weights = copy.deepcopy(ws.model.state_dict())
        trials, ends = {}, {}
        for lam in grid:
            ws.model.load_state_dict(start_weights)
            trial = ContinualState(records=list(state.records), memory=copy.deepcopy(state.memory))
            flags: dict[int, dict[str, list[bool]]] = {}

            def read(step: int, t=t, flags=flags) -> None:
                with torch.random.fork_rng(devices=[]):
                    flags[step] = {task: exact_match_flags(ws.model, ws.tokenizer, ws.encoded[task]["dev"],
                                                           batch_size=config.eval_batch_size, progress=False)
                                   for task in seen_tasks(ws, t)}

            ws.lambdas[t] = lam
            run_task(ws, trial, t, progress=False, test=False, watch=Watch(t, frozenset(steps), read))
            trials[lam] = {"rungs": {str(s): f for s, f in flags.items()}, "dev": trial.records[-1].dev}
            ends[lam] = (trial, copy.deepcopy(ws.model.state_dict()))
        chosen = selection.choose(selection.standings({lam: math.fsum(v["dev"]) / len(v["dev"])
                                                       for lam, v in trials.items()}))
        state, weights = ends[chosen]
        ws.model.load_state_dict(weights)
        ws.lambdas[t] = chosen
        stages.append({"task": ws.tasks[t], "total_steps": total, "steps": steps, "chosen": chosen,
                       "trials": {f"{lam:g}": v for lam, v in trials.items()}})
        print(f"stage {t + 1} {ws.tasks[t]}: λ {chosen:g}, dev means "
              + " ".join(f"{lam:g}:{100 * statistics.mean(v['dev']):.1f}" for lam, v in trials.items()), flush=True)
    out = {"order": args.order, "seed": args.seed, "tasks": list(ws.tasks), "batch_size": config.batch_size,
           "train_steps": {task: steps_per_epoch(len(ws.encoded[task]["train"]), config.batch_size)
                           for task in ws.tasks},
           "fractions": FRACTIONS, "stages": stages, "seconds": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out))
    print(f"written {args.out} in {out['seconds']:.0f} s")


def rung_means(stage: dict, step: int, examples: int, seed: int, tasks: list[str]) -> dict[str, float]:
    """Per λ: the mean over the seen tasks of the rung subset's accuracy at `step`."""
    means = {}
    for lam, trial in stage["trials"].items():
        per_task = []
        for task in tasks:
            flags = trial["rungs"][str(step)][task]
            chosen = subset_indices(len(flags), examples, seed, task, "dev")
            per_task.append(sum(flags[i] for i in chosen) / len(chosen))
        means[lam] = math.fsum(per_task) / len(per_task)
    return means


def simulate(run: dict, layout: Halving, larger_first: bool = False) -> dict:
    """Successive halving replayed on one recorded grid: per stage the λ chosen, the grid's verdict, the steps. Trials
    tied at a rung go on from both ends of their λ range inward, as `halving.survivors` decides, the smallest first,
    or with `larger_first` the largest first: in the first steps of a task every λ trains alike (ΔW ≈ 0, so λ·P pulls
    on nothing yet) and a rung there ties them all, so a layout is judged by the worse of the two (its choice must
    not be the tie rule's)."""
    found = []
    for index, stage in enumerate(run["stages"], start=1):
        tasks = run["tasks"][: index + 1]
        lambdas = {lam: -float(lam) if larger_first else float(lam) for lam in stage["trials"]}
        alive = set(lambdas)
        steps = layout.rung_steps(stage["total_steps"])
        keep = layout.alive(len(lambdas), len(steps))[1:]
        for k, step in enumerate(steps):
            means = rung_means(stage, step, layout.examples, run["seed"], tasks)
            alive = survivors({lam: means[lam] for lam in alive}, keep[k], lambdas)
        full = {lam: math.fsum(v["dev"]) / len(v["dev"]) for lam, v in stage["trials"].items()}
        best = max(full.values())
        names = {float(lam): lam for lam in alive}
        pick = names[selection.choose(selection.standings({float(lam): full[lam] for lam in alive}))]
        n_dev = sum(len(stage["trials"][pick]["rungs"][str(stage["steps"][0])][task]) for task in tasks)
        noise = math.sqrt(best * (1 - best) / n_dev)
        verdict = "same" if float(pick) == stage["chosen"] else ("tie" if best - full[pick] <= noise else "miss")
        found.append({"pick": float(pick), "grid": stage["chosen"], "verdict": verdict, "loss": best - full[pick],
                      "steps": sum(planned_steps(len(lambdas), stage["total_steps"], layout)),
                      "grid_steps": len(lambdas) * stage["total_steps"]})
    return {"stages": found, "fixed_steps": sum(run["train_steps"].values())}  # task 1 and the a0 of the others


def assess(runs: list[dict], layout: Halving) -> dict:
    """A layout over every recorded grid: its share of the grid's steps, its verdicts and the dev accuracy it loses
    (of the two tie rules, the one that loses more)."""
    both = [[simulate(run, layout, larger_first) for run in runs] for larger_first in (False, True)]
    replays = max(both, key=lambda found: sum(s["loss"] for replay in found for s in replay["stages"]))
    stages = [s for replay in replays for s in replay["stages"]]
    steps = sum(replay["fixed_steps"] + sum(s["steps"] for s in replay["stages"]) for replay in replays)
    grid = sum(replay["fixed_steps"] + sum(s["grid_steps"] for s in replay["stages"]) for replay in replays)
    verdicts = [s["verdict"] for s in stages]
    return {"layout": layout, "share": steps / grid, "same": verdicts.count("same"), "tie": verdicts.count("tie"),
            "miss": verdicts.count("miss"), "stages": len(stages),
            "loss": statistics.mean(s["loss"] for s in stages), "worst": max(s["loss"] for s in stages)}


def analyse(args) -> None:
    runs = [json.loads(path.read_text()) for path in args.records]
    rows = [assess(runs, Halving(tuple(rungs), eta, examples))
            for r in range(1, 4) for rungs in itertools.combinations(FRACTIONS, r)
            for eta, examples in itertools.product(ETAS, SUBSETS)]
    fitting = sorted((row for row in rows if row["share"] <= args.target), key=lambda row: (row["loss"], row["worst"]))
    print(f"{len(runs)} recorded grid(s): " + ", ".join(f"order {run['order']} seed {run['seed']}" for run in runs)
          + f"; {len(rows)} layouts, {len(fitting)} within {100 * args.target:.0f} % of the grid's steps")

    def line(row) -> list:
        layout = row["layout"]
        return [", ".join(f"{f:.3g}" for f in layout.fractions), layout.eta, layout.examples,
                f"{100 * row['share']:.1f}", f"{row['same']}/{row['tie']}/{row['miss']} of {row['stages']}",
                f"{100 * row['loss']:.2f}", f"{100 * row['worst']:.2f}"]

    header = ["rungs", "η", "rung examples", "steps % of grid", "same / tie / miss", "mean dev loss (pt)",
              "worst dev loss (pt)"]
    print(f"the best {args.top} within the target:")
    print(tables.markdown(header, [line(row) for row in fitting[: args.top]]))
    front, best = [], math.inf
    for row in sorted(rows, key=lambda row: (row["share"], row["loss"])):
        if row["loss"] < best - 1e-12:
            front.append(row)
            best = row["loss"]
    print("the trade-off: each layout that loses less dev accuracy than every cheaper one")
    print(tables.markdown(header, [line(row) for row in front]))
    print("search_spaces/halving.yaml now:")
    print(tables.markdown(header, [line(assess(runs, Halving.default()))]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("--order", type=int, default=1)
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--max-tasks", type=int, default=None)
    rec.add_argument("--max-train-per-task", type=int, default=1024)
    rec.add_argument("--max-eval-per-task", type=int, default=100)
    rec.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "cache")
    rec.add_argument("--out", type=Path, default=None)
    ana = commands.add_parser("analyse")
    ana.add_argument("records", nargs="+", type=Path)
    ana.add_argument("--target", type=float, default=0.5, help="most of the grid's optimizer steps a layout may run")
    ana.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.command == "record":
        args.out = args.out or ROOT / "runs" / "bench" / f"layouts-o{args.order}-s{args.seed}.json"
        record(args)
    else:
        analyse(args)


if __name__ == "__main__":
    main()
