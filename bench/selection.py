"""Which λ should a grid stage keep: `best` (SPEC §5) or `1se` (glmnet's lambda.1se)? Measured against plain LoRA and
the paper's λ, with intervals.

    python bench/selection.py record --order 1 --seed 1 [--train 640] [--out runs/bench/selection-o1-s1.json]
    python bench/selection.py report runs/bench/selection-*.json

`record` runs, for one order and seed, in this process with the library alone, on the synthetic benchmark with the
tiny preset (the smoke preset with `--train` training examples a task and every dev and test example: 64 and 100):
plain LoRA (inclora), jumplora+ella with the paper's λ (SPEC §5), and jumplora+ella with the λ grid of
`search_spaces/lambda_grid.yaml` chosen per stage by `best` and by `1se` (`jumplora.selection`, as `grid_lambda.py
--select` chooses): each stage's λ trained from the model its rule chose at the stage before, as the grid's trials
(`continual.run_task_group`), the two rules sharing their trials until they first choose apart; the chosen λ's test
row evaluated. It writes the four runs' results (results.json's payload, flags and intervals included) and, per stage
and rule, every λ's standing (dev mean, SE of its paired difference to the best, within one SE or not).

`report` prints, from every recorded (order, seed): each run's OA and BWT with their 95 % bootstrap intervals
(`jumplora.uncertainty`); per order, each arm against plain LoRA and `1se` against `best` over the seeds (the paired
difference, its interval over the seeds and their test examples, rliable's probability of improvement from two seeds
on, the verdict with what it rests on; the table's comparisons one family, Bonferroni); and per stage what each rule
chose and how many of the stage's λ were within one SE of the best (the λ the data cannot tell from the best). Not
part of `make test`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora import selection, spaces, tables, uncertainty  # noqa: E402
from jumplora.config import RunConfig  # noqa: E402
from jumplora.continual import (  # noqa: E402
    ContinualState,
    evaluate_test_row,
    prepare,
    run_continual,
    run_task,
    run_task_group,
    summarise,
)
from jumplora.data import order_tasks  # noqa: E402
from jumplora.results import RunResults  # noqa: E402

ARMS = ("inclora", "paper", selection.BEST, selection.ONE_SE)  # plain LoRA, the paper's λ, the grid by each rule
METHOD = "jumplora+ella"


def config(args, method: str, lambdas) -> RunConfig:
    fields = {**spaces.preset("smoke"), "max_train_per_task": args.train, "max_eval_per_task": None}
    return RunConfig(order=args.order, seed=args.seed, method=method, lambdas=lambdas, **fields)


def one_run(args, method: str, lambdas) -> RunResults:
    ws = prepare(config(args, method, lambdas), args.cache_dir, progress=False)
    return summarise(ws, run_continual(ws, progress=False), None)


def add_update(model, update: dict[str, torch.Tensor]) -> None:
    """Merge a task's update into the model's weights, as restoring its checkpoint does (`checkpoints.load`)."""
    with torch.no_grad():
        for name, value in update.items():
            weight = model.get_submodule(name).weight
            weight.add_(value.to(weight.device, weight.dtype))


def grid_runs(args) -> tuple[dict[str, RunResults], dict[str, list[dict]]]:
    """The grid's run by each rule, and per rule per stage t ≥ 2 the standings it chose from."""
    grid = spaces.lambda_grid()
    n = len(order_tasks(None, args.order))
    ws = prepare(config(args, METHOD, [0.0] * n), args.cache_dir, progress=False)
    state = ContinualState()
    run_task(ws, state, 0, progress=False)  # stage 1: task 1 with λ = 0, dev and test
    # the paths still training: chosen λ so far → (state, weights, the rules on it)
    paths = {(0.0,): (state, {k: v.clone() for k, v in ws.model.state_dict().items()}, list(selection.RULES))}
    stages: dict[str, list[dict]] = {rule: [] for rule in selection.RULES}
    for t in range(1, n):
        found = {}
        for chosen, (start, weights, rules) in paths.items():
            ws.model.load_state_dict(weights)
            outcomes = dict(zip(grid, run_task_group(ws, start, t, grid, progress=False), strict=True))
            standings = selection.standings({lam: math.fsum(o.records[-1].dev) / len(o.records[-1].dev)
                                             for lam, o in outcomes.items()},
                                            {lam: o.records[-1].dev_flags for lam, o in outcomes.items()})
            for rule in rules:
                lam = selection.choose(standings, rule)
                stages[rule].append({"task": t + 1, "lambda": lam, "shared": len(rules) > 1,
                                     "standings": [dataclasses.asdict(s) for s in standings]})
                key = (*chosen, lam)
                if key not in found:
                    ws.model.load_state_dict(weights)
                    add_update(ws.model, outcomes[lam].records[-1].update)
                    evaluate_test_row(ws, outcomes[lam], progress=False)
                    found[key] = (outcomes[lam], {k: v.clone() for k, v in ws.model.state_dict().items()}, [])
                found[key][2].append(rule)
        paths = found
    runs = {rule: summarise(dataclasses.replace(ws, lambdas=list(chosen)), state, None)
            for chosen, (state, _, rules) in paths.items() for rule in rules}
    return runs, stages


def record(args) -> None:
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    runs = {"inclora": one_run(args, "inclora", "paper"), "paper": one_run(args, METHOD, "paper")}
    found, stages = grid_runs(args)
    runs.update(found)
    out = {"order": args.order, "seed": args.seed, "train": args.train,
           "runs": {arm: runs[arm].to_json() for arm in ARMS}, "stages": stages,
           "seconds": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out))
    print(f"written {args.out} in {out['seconds']:.0f} s")


def interval(results: RunResults, metric: str) -> str:
    value = getattr(results, metric)
    return f"{value:.2f} {uncertainty.intervals_of(results).metrics[metric].text(digits=2)}"


def cell_text(found: uncertainty.Comparison) -> str:
    """A comparison's cell: difference, interval, rliable's P(improvement) where there are two seeds or more, and the
    verdict (`uncertainty.Comparison.verdict`, with what it rests on)."""
    if found.interval is None:
        return found.verdict
    improvement = "" if found.improvement is None else \
        f" P {found.improvement.value:.2f} {found.improvement.interval.text(digits=2)}"
    return f"{found.difference:+.2f} {found.interval.text(digits=2)}{improvement}: {found.verdict}"


def report(args) -> None:
    recorded = sorted((json.loads(path.read_text()) for path in args.records), key=lambda r: (r["order"], r["seed"]))
    runs = {(r["order"], r["seed"]): {arm: RunResults.from_json(data) for arm, data in r["runs"].items()}
            for r in recorded}
    print(f"{len(recorded)} recorded (order, seed): " + ", ".join(f"({r['order']}, {r['seed']})" for r in recorded)
          + f"; training examples a task: {sorted({r['train'] for r in recorded})}; "
          + "minutes: " + ", ".join(f"{r['seconds'] / 60:.1f}" for r in recorded))
    rows = [[order, seed, arm, " ".join(f"{lam:g}" for lam in results.lambdas), interval(results, "oa"),
             interval(results, "bwt")]
            for (order, seed), arms in runs.items() for arm, results in arms.items()]
    print("each run: final test OA and BWT (%, points) with the 95 % bootstrap interval over its test examples")
    print(tables.markdown(["order", "seed", "arm", "λ per task", "OA [95 %]", "BWT [95 %]"], rows))
    found = []
    for order in sorted({order for order, _ in runs}):
        seeds = [arms for (o, _), arms in runs.items() if o == order]
        for reference, other in [("inclora", "paper"), ("inclora", selection.BEST), ("inclora", selection.ONE_SE),
                                 (selection.BEST, selection.ONE_SE)]:
            flags = [[uncertainty.RunFlags.of(arms[arm]) for arms in seeds] for arm in (reference, other)]
            found += [((order, len(seeds), f"{other} − {reference}"), uncertainty.compare(flags[0], flags[1], metric))
                      for metric in ("oa", "bwt")]
    family = uncertainty.in_family([compared for _, compared in found])
    rows = [[*row, *(cell_text(c) for c in family[k:k + 2])] for k, (row, _) in zip(range(0, len(found), 2),
                                                                                   found[::2], strict=True)]
    k = sum(c.refused is None for c in family)
    print(f"over the seeds: the mean paired difference, its interval over the seeds and their test examples "
          f"({uncertainty.family_text(k)}), rliable's probability of improvement from two seeds on, and the verdict "
          "with what it rests on")
    print(tables.markdown(["order", "seeds", "arms", "ΔOA", "ΔBWT"], rows))
    rows, shared, same, within = [], 0, 0, []
    for r in recorded:
        for best, one in zip(r["stages"][selection.BEST], r["stages"][selection.ONE_SE], strict=True):
            shared += best["shared"]
            same += best["shared"] and best["lambda"] == one["lambda"]
            cells = []
            for stage in (best, one):
                near = [s["lam"] for s in stage["standings"] if s["within"]]
                within.append(len(near))
                cells += [f"{stage['lambda']:g}", f"{len(near)}: {' '.join(f'{lam:g}' for lam in near)}"]
            rows.append([r["order"], r["seed"], best["task"], "yes" if best["shared"] else "no", *cells])
    print("per stage: the λ each rule chose and the λ within one SE of the best in its stage (the data cannot tell "
          "them from the best); 'same start': both rules chose alike so far")
    print(tables.markdown(["order", "seed", "stage", "same start", "best: λ", "best: λ within 1 SE",
                           "1se: λ", "1se: λ within 1 SE"], rows))
    print(f"stages where both rules started from the same model: {shared}; the same λ chosen in {same}, another λ "
          f"(within one SE of the best, so indistinguishable from it by the rule's own test) in {shared - same}; "
          f"λ within one SE of the best per stage: mean {sum(within) / len(within):.1f} of "
          f"{len(spaces.lambda_grid())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("--order", type=int, default=1)
    rec.add_argument("--seed", type=int, default=1)
    rec.add_argument("--train", type=int, default=640, help="training examples a task (batch 32: 20 steps)")
    rec.add_argument("--threads", type=int, default=1, help="torch threads")
    rec.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "cache")
    rec.add_argument("--out", type=Path, default=None)
    rep = commands.add_parser("report")
    rep.add_argument("records", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        args.out = args.out or ROOT / "runs" / "bench" / f"selection-o{args.order}-s{args.seed}.json"
        record(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
