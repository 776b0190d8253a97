"""The plan a grid prints before it runs (`grid_lambda.py --dry-run`, `--calibrate`): its stages and their trials,
packed as the run packs them, the rule that chooses their λ, what each stage costs in the chosen search and in the
others, both packings of the λ, the resources and, when calibrated, the estimated time."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora import selection
from jumplora.methods.registry import plan_settings
from jumplora.steps import steps_per_epoch
from jumplora.storage import Storage
from ray_jobs import costs, jobs, searches
from ray_jobs.search import PLAIN, Search
from ray_jobs.stages import AUTO, Stage, one_lambda_only, pack, stage_packing

if TYPE_CHECKING:
    from jumplora.calibration import Rates


def describe_plan(job: jobs.Job, preset: str, stages: list[Stage], request, concurrent: int,
                  folder: Storage, test_all: bool = False, rates: Rates | None = None, search: Search = PLAIN,
                  per_trial: int | str = AUTO, seeds: tuple[int, ...] | None = None) -> str:
    """The stages and their trials, packed as the run packs them (`stage_packing`, `pack`; `concurrent` trials at
    once, `trials_at_once`), the rule that chooses their λ, what each costs (`costs`) in the chosen search and the
    steps and evaluations of every search compared (`searches.layouts`), the λ per trial and both packings' trials
    and process starts, the resources and, when calibrated, the estimated time of each packing. With `seeds` (a grid
    of several) every count is over the seeds: each stage's trials once per seed, one seed's after another's."""
    config = job.run
    only_one = one_lambda_only(config.method, search, test_all)
    packing = stage_packing(per_trial, stages, request, only_one, concurrent)
    n_trials = [len(pack(stage, job, k, set(), folder.child(stage.name), test_all))
                for stage, k in zip(stages, packing, strict=True)]
    lines = [f"λ {search.title} of order {config.order} ({', '.join(s.task for s in stages)}): {config.method}, "
             f"{plan_settings(config) or 'no settings of its own'}, {seeds_text(config.seed, seeds)}, preset {preset} "
             f"(model {config.model}); data: {config.data_dir or 'the synthetic benchmark'}"]
    for stage, n in zip(stages, n_trials, strict=True):
        what = f"λ ∈ {{{', '.join(f'{lam:g}' for lam in stage.lambdas)}}}"
        if stage.baselines:
            what += f", and single-task baselines of tasks {stage.baselines[0] + 1}..{stage.baselines[-1] + 1}"
        start = "the base model" if stage.index == 0 else f"the model chosen at stage {stage.index}"
        trainings = len(stage.lambdas) + len(stage.baselines)
        lines.append(f"stage {stage.index + 1}: task {stage.index + 1} {stage.task}: {what}; from {start}; "
                     + (f"{trainings} trainings in {n} trial(s)" if seeds is None else
                        f"{len(seeds) * trainings} trainings in {len(seeds) * n} trial(s), {n} a seed"))
    lines.append(f"each stage keeps the λ that --select {search.rule} chooses: {selection.DESCRIPTIONS[search.rule]}")
    sizes = costs.split_sizes(job.run, tuple(stage.task for stage in stages), Path(job.cache_dir))
    for stage in stages[1:]:  # e.g. rungs that a short task puts on one step, planned (and run) as one
        note = search.notes(steps_per_epoch(sizes[stage.task]["train"].examples, config.batch_size))
        lines += [f"stage {stage.index + 1}: {note}"] if note else []
    compared, unread = searches.layouts(search, seeds is None)  # the grid, the one given, the others' defaults
    both = {name: plan_costs(job, stages, test_all, layout, sizes, seeds) for name, layout in compared.items()}
    stage_costs = both[search.name]
    lines.append(costs.table([(str(s.index + 1), s.task) for s in stages], stage_costs))
    total = sum(stage_costs, costs.Cost())
    lines.append(f"{total.trainings} trainings of one task each; per trial {request.describe()} (training on "
                 f"{'GPU' if request.gpus else 'CPU'}); {concurrent} at once")
    n_lambdas, baselines = [len(s.lambdas) for s in stages], [len(s.baselines) for s in stages]
    runs = len(seeds or (None,))
    starts = [runs * costs.process_starts(n, request.workers, concurrent, not test_all) for n in n_trials]
    lines.append(f"worker processes started (each pays the device's cold start once; on a CPU Ray may reuse a "
                 f"task's): {sum(starts) + runs} (per stage {', '.join(map(str, starts))}; {runs} to publish)")
    lines += unread if len(both) == 1 else [compare_searches(compared, both, test_all), *unread]
    lines.append(describe_packing(per_trial, packing, only_one, request.gpus > 0, concurrent))
    lines.append(costs.compare_packings(n_lambdas, baselines, stage_costs, request, concurrent, not test_all, rates,
                                        runs))
    if rates is not None:
        lines.append(costs.estimate(total, rates, concurrent, request.total_gpus, sum(starts) + runs))
    lines.append(f"storage: {folder.uri}")
    return "\n".join(lines)


def describe_packing(setting: int | str, packing: list[int], only_one: str | None, gpu: bool,
                     concurrent: int) -> str:
    """How the run packs the λ of its stages t ≥ 2 (stage 1 trains one λ; `stage_packing`), and why when it cannot
    stack them; `auto` on a CPU also says by how many trials at once."""
    if only_one:
        return f"λ per trial: 1 ({only_one})"
    if gpu and setting == AUTO:
        return ("λ per trial: 1 (auto on a GPU, until a stack's peak memory per λ is calibrated; "
                "--lambdas-per-trial K stacks K)")
    sizes = "/".join(map(str, sorted(set(packing[1:])))) or "1"
    why = f": a stage's λ spread over the {concurrent} trial(s) at once" if setting == AUTO else ""
    return (f"λ per trial: {sizes} (--lambdas-per-trial {setting}{why}); a trial of several λ trains them as one "
            f"stack, from one start, in one process")


def compare_searches(compared: dict[str, Search], both: dict[str, list[costs.Cost]], test_all: bool) -> str:
    """Optimizer steps (and their worth in whole trainings) and evaluated examples of the plain grid and of each other
    search `compared`, then each other one's layout in words (`Search.describe`)."""
    grid = both[searches.DEFAULT]
    grid_total = sum(grid, costs.Cost())
    lines = ["expected work of each search (--search):"]
    for name, stage_costs in both.items():
        total = sum(stage_costs, costs.Cost())
        worth = grid_total.trainings if name == searches.DEFAULT else \
            sum(c.steps / (g.steps / g.trainings) for c, g in zip(stage_costs, grid, strict=True))
        share = "" if name == searches.DEFAULT else \
            f" ({100 * total.steps / grid_total.steps:.0f} % of the grid's steps)"
        lines.append(f"  {name}: {total.steps:,} optimizer steps{share}, worth {worth:.1f} trainings; evaluated "
                     f"{total.dev_examples:,} dev + {total.test_examples:,} test examples")
    lines += [f"  {name}: {layout.describe()}" + (" (not with --test-all-trials)" if test_all and
                                                   not searches.searches()[name].test_all else "")
              for name, layout in compared.items() if name != searches.DEFAULT]
    return "\n".join(lines)


def plan_costs(job: jobs.Job, stages: list[Stage], test_all: bool = False, search: Search = PLAIN,
               sizes: dict[str, dict[str, costs.Split]] | None = None,
               seeds: tuple[int, ...] | None = None) -> list[costs.Cost]:
    """What each stage trains and evaluates (`Search.stage_cost`), from the examples the run will load (`sizes`, of
    the job's seed); with `seeds`, summed over them (a seed samples its own examples: each seed's sizes)."""
    tasks = tuple(stage.task for stage in stages)
    found = []
    for seed in seeds or (job.run.seed,):
        config = dataclasses.replace(job.run, seed=seed)
        seed_sizes = sizes if sizes and seed == job.run.seed else costs.split_sizes(config, tasks, Path(job.cache_dir))
        found.append([search.stage_cost(s.index, len(s.lambdas), s.baselines, tasks, seed_sizes, test_all,
                                        config.batch_size) for s in stages])
    return [sum(per_stage, costs.Cost()) for per_stage in zip(*found, strict=True)]


def seeds_text(seed: int, seeds: tuple[int, ...] | None) -> str:
    """The plan's words for the seeds: `seed 42`, or the seeds of a grid of several and what they do."""
    if seeds is None:
        return f"seed {seed}"
    return (f"seeds {', '.join(map(str, seeds))} (each stage trains every λ on each seed, one seed's trials after "
            "another's; the λ chosen on the mean dev accuracy over the seeds, each seed carrying on from its own "
            "model with it)")
