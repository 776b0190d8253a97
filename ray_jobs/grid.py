"""`grid_lambda.py --order N`: the per-task λ grid of SPEC §5 on Ray Tune, the driver (stage 1: task 1 with λ = 0 and
the a0 runs of tasks 2..T, `stages.plan`; resuming, packing, `--select`, `--seeds`, `--search`: ray_jobs/README.md).
By concern: `stages`, `search` and `halving` (declared in `searches`), `manifest`, `grid_plan` (the plan),
`grid_report` (the tables and report)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import ray
import ray.train

from jumplora import continual, guidance, options, selection, spaces, tables, tracking
from jumplora.config import RunConfig
from jumplora.data import order_tasks
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS, get_method
from jumplora.results import RunResults, StageRecord, TrialRecord
from jumplora.steps import steps_per_epoch
from jumplora.storage import GRID, RUN_DIR, Storage
from jumplora.tracking import folders
from ray_jobs import cli, cluster, jobs, publishing, search, searches, trials
from ray_jobs.grid_plan import describe_plan
from ray_jobs.grid_report import PLOTS, report_text, trial_table
from ray_jobs.manifest import Manifest, grid_identity
from ray_jobs.search import Search
from ray_jobs.stages import AUTO, Stage, one_lambda_only, pack, plan, stage_packing, trials_at_once

if TYPE_CHECKING:
    from jumplora.calibration import Rates

CHOSEN = "chosen"  # <stage>/chosen: the chosen trial's checkpoint with its test row, the start of the next stage
RUNS_DIR = "runs"  # a grid of several seeds publishes each seed's run directory in runs/seed<S> (`run_dir`)


def main(args: argparse.Namespace) -> int:
    way = searches.checked(args)
    seeds = checked_seeds(args, way)
    config, job, stages = checked_grid(args)
    only_one = one_lambda_only(config.method, way, args.test_all_trials)
    if args.lambdas_per_trial not in (AUTO, 1) and only_one:
        raise JumpLoRAError(f"--lambdas-per-trial {args.lambdas_per_trial}: {only_one}; leave the option out")
    settings = "".join(f"-{value}" for value in config.settings_values().values())
    seeds_part = f"seed{config.seed}" if seeds is None else f"seeds{'-'.join(map(str, seeds))}"
    name = args.name or (f"grid-order{config.order}-{config.method}-{config.threshold}{settings}-{args.preset}-"
                         f"{seeds_part}{'' if way.name == search.Grid.name else '-' + way.name}"
                         f"{'' if way.rule == selection.BEST else '-' + way.rule}")
    storage = Storage(args.storage_path)
    request, concurrent = fit(args, stages, way)
    if args.dry_run or args.calibrate:
        rates = calibrate(job, request) if args.calibrate else None
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name), args.test_all_trials,
                            rates, way, args.lambdas_per_trial, seeds))
        return 0
    storage.check_writable()
    job_folder = storage.job(name, GRID, cli.cache_dir(args), grid_identity(job, stages, way, seeds))
    tracker = tracking.from_args(args)
    with job_folder.held() as folder:
        cluster.connect()
        jobs.build_base(job)
        cluster.warn_if_storage_not_shared(storage)
        log = folders.GridLog(tracker, name, folder, job.identity()["run"], [s.task for s in stages],
                              [list(s.lambdas) for s in stages], way.rule) if tracker else None
        run_grid(folder, job, stages, request, concurrent, log, args.test_all_trials, way,
                 args.lambdas_per_trial, folders.ModelRequest.of(args), seeds)
    return 0


def fit(args: argparse.Namespace, stages: list[Stage], way: Search) -> tuple[cluster.WorkerRequest, int]:
    """One trial's resources and how many trials run at once, checked against the cluster (a halving search's λ all
    at once) before Ray starts (`cluster.resources`: a local Ray's are known before), as a plan counts them."""
    request = cli.trial_request(args)
    concurrent = trials_at_once(args.max_concurrent, stages, request)
    cluster.check_fits(request, concurrent)
    # the search's stages t ≥ 2 (stage 1 trains one λ)
    way.check_fits(max((len(stage.lambdas) for stage in stages[1:]), default=1), concurrent, request)
    return request, concurrent


def checked_seeds(args: argparse.Namespace, way: Search) -> tuple[int, ...] | None:
    """`--seeds` of a grid of several seeds (None: one seed, the preset's or --seed's, as before seeds; one value of
    --seeds is that one seed, `checked_grid`), refused with --seed (a seed twice: by its parser), with a halving
    search (its rungs compare a seed's λ with each other: the mean over seeds is not known until every seed is there)
    and with MLflow tracking (a grid logs one run directory); before anything loads."""
    seeds = args.seeds
    if seeds is not None and "seed" in options.given(args):
        raise JumpLoRAError("--seed and --seeds both given: give the grid's seeds in --seeds alone, e.g. "
                            "--seeds 1,2,3")
    if seeds is None or len(seeds) == 1:
        return None
    if way.name != search.Grid.name:
        raise JumpLoRAError(f"--seeds: --search {way.name} compares a seed's λ at rungs; with several seeds use "
                            "--search grid")
    if not args.no_tracking:
        raise JumpLoRAError("--seeds: a grid of several seeds is not logged to MLflow; add --no-tracking (then "
                            "`jumplora track <storage>/<name>/runs/seed<S>` logs each seed's run)")
    return tuple(seeds)


def checked_grid(args: argparse.Namespace) -> tuple[RunConfig, jobs.Job, list[Stage]]:
    """The configuration (of the first seed of `--seeds`), the job and the stages, all checked before Ray is touched
    (the data of every seed)."""
    config = cli.run_config(args, "grid", order=args.order, **({} if args.seeds is None else {"seed": args.seeds[0]}))
    if not get_method(config.method).per_task_lambda:
        with_lambda = ", ".join(name for name, spec in METHODS.items() if spec.per_task_lambda)
        raise JumpLoRAError(f"the λ grid needs a method with a per-task λ ({with_lambda}), got {config.method}")
    # each stage sets its λ
    config = dataclasses.replace(config, lambdas=[0.0] * len(order_tasks(config.data_dir, config.order)))
    grid = spaces.method_grid(config.method) if args.grid is None else args.grid
    tasks = jobs.check(config, args.workers_per_trial)
    for seed in (args.seeds or ())[1:]:  # a seed samples its own examples: each is checked
        jobs.check(dataclasses.replace(config, seed=seed), args.workers_per_trial)
    return config, jobs.Job(config, cli.cache_dir(args)), plan(tasks, grid)


def run_grid(folder: Storage, job: jobs.Job, stages: list[Stage], request, concurrent: int,
             log: folders.GridLog | None = None, test_all: bool = False, way: Search = search.PLAIN,
             per_trial: int | str = AUTO, model: folders.ModelRequest = folders.NO_MODEL,
             seeds: tuple[int, ...] | None = None) -> None:
    manifest = Manifest(folder, grid_identity(job, stages, way, seeds))
    if manifest.stages:  # a resubmitted grid
        print(f"{folder.uri}: stage(s) {', '.join(f'{r.task} ({r.task_name})' for r in manifest.stages)} finished "
              "before, skipped", flush=True)
    benchmark = continual.run_benchmark(job.run, tuple(stage.task for stage in stages))
    packing = stage_packing(per_trial, stages, request, one_lambda_only(job.run.method, way, test_all), concurrent)
    for stage in stages[len(manifest.stages):]:
        steps = steps_per_epoch(len(benchmark.tasks[stage.task].train), job.run.batch_size)
        manifest.add(run_stage(stage, job, manifest.stages, request, concurrent, folder, test_all, way,
                               way.rungs(stage.index, steps), packing[stage.index], seeds))
        if log is not None:
            log.stage(manifest.stages[-1])
    runs = finish(folder, job, manifest.stages, request, model, way.rule, seeds)
    if log is not None:
        log.end(manifest.stages)
    print(report_text(manifest.stages, runs, way.rule))
    print(f"grid folder: {folder.uri}")


def stage_job(job: jobs.Job, records: list[StageRecord], seed: int | None = None) -> jobs.Job:
    """The job as seen by a stage (of `seed`, in a grid of several): λ of the finished tasks as chosen, the others 0
    (a trial sets its own)."""
    lambdas = [record.selected_lam for record in records]
    job = job.with_lambdas(lambdas + [0.0] * (len(job.run.lambdas) - len(lambdas)))
    return job if seed is None else dataclasses.replace(job, run=dataclasses.replace(job.run, seed=seed))


def run_dir(seed: int | None) -> str:
    """A seed's published run directory under the grid's folder: `run` (one seed, as before seeds), `runs/seed<S>`."""
    return RUN_DIR if seed is None else f"{RUNS_DIR}/seed{seed}"


def checkpoint(path: str | None, folder: Storage):
    return ray.train.Checkpoint(path, filesystem=folder.fs) if path else None


@dataclasses.dataclass
class SeedTrials:
    """What a stage's trials of one seed (None: a grid of one) left: its job, folder, results (by result id: one per
    λ, `Stage.lambda_id`, and per baseline) and each λ's record; `start`: the checkpoint its next stage starts from,
    once the stage has chosen."""

    seed: int | None
    job: jobs.Job
    folder: Storage
    results: dict[str, trials.TrialResult]
    candidates: list[TrialRecord]
    start: str | None = None


def run_seed(stage: Stage, job: jobs.Job, records: list[StageRecord], request, concurrent: int, folder: Storage,
             test_all: bool, way: Search, rungs: jobs.Rungs | None, per_trial: int, seed: int | None) -> SeedTrials:
    """Stage `stage`'s trials of `seed` (one Tune experiment in `<grid>/seed<S>`, the grid's folder for one seed, from
    its own choice of the stage before), `per_trial` λ in each (`way` compares its λ at `rungs` and stops some); the λ
    recorded as finished are not run again."""
    folder = folder if seed is None else folder.child(f"seed{seed}")
    start = checkpoint(records[-1].start(seed), folder) if records else None
    this_job = stage_job(job, records, seed)
    lambdas = {stage.lambda_id(lam): lam for lam in stage.lambdas}
    finished = trials.recorded(folder, stage.name, list(lambdas))
    running = pack(stage, this_job, per_trial, finished, folder.child(stage.name), test_all, rungs)
    at_once = min(concurrent, len(running))
    print(f"stage {stage.index + 1} ({stage.task}{'' if seed is None else f', seed {seed}'}): "
          f"{len(lambdas) + len(stage.baselines)} trainings in {len(running)} trial(s), {at_once} at a time"
          + (f", compared after steps {', '.join(map(str, rungs.steps))}" if rungs else ""), flush=True)
    results = trials.run_trials(stage.name, running, request, at_once, folder, start=start,
                                scheduler=way.scheduler(rungs, lambdas))
    candidates = [candidate(lam, results[lam_id], seed) for lam_id, lam in lambdas.items()]
    return SeedTrials(seed, this_job, folder, results, candidates)


def run_stage(stage: Stage, job: jobs.Job, records: list[StageRecord], request, concurrent: int, folder: Storage,
              test_all: bool = False, way: Search = search.PLAIN, rungs: jobs.Rungs | None = None,
              per_trial: int = 1, seeds: tuple[int, ...] | None = None) -> StageRecord:
    """Stage `stage`'s trials of each seed (`run_seed`), the λ the search chooses (on the mean over the seeds,
    `guidance.standings`), each seed's chosen trial's test row; the stage's record: per λ and seed, however they were
    packed."""
    started = time.monotonic()
    parts = [run_seed(stage, job, records, request, concurrent, folder, test_all, way, rungs, per_trial, seed)
             for seed in seeds or (None,)]
    candidates = [found for part in parts for found in part.candidates]
    lam = way.choose(candidates).lam
    reported = [result.metrics for part in parts for result in part.results.values()]
    work = sum(map(jobs.Work.from_metrics, reported), jobs.Work())
    for part in parts:
        for found in part.candidates:
            found.selected = found.lam == lam
        chosen = next(found for found in part.candidates if found.selected)
        part.start = chosen.checkpoint
        if not test_all:  # the chosen trial's row of the test accuracy matrix, evaluated once
            test_row = ray.remote(publishing.with_test_row).options(num_cpus=request.cpus, num_gpus=request.gpus)
            part.start, row, tested = ray.get(test_row.remote(part.job.with_lambda(stage.index, lam),
                                                              checkpoint(chosen.checkpoint, part.folder),
                                                              part.folder.child(stage.name).uri, CHOSEN))
            chosen.test_mean = math.fsum(row) / len(row)
            work += jobs.Work(test_examples=tested)
    baselines = [{"task": j + 1, **{key: part.results[stage.baseline_id(j)].metrics.get(key)
                                    for key in ("a0", "a0_flags", "seconds", "steps")},
                  **({} if part.seed is None else {"seed": part.seed})}
                 for part in parts for j in stage.baselines]
    seconds = time.monotonic() - started
    record = StageRecord(task=stage.index + 1, task_name=stage.task, selected_lam=lam,
                         checkpoint=parts[0].start if seeds is None else None,
                         trials=sorted(candidates, key=lambda c: (c.seed or 0, c.lam)),
                         baselines=sorted(baselines, key=lambda b: (b.get("seed", 0), b["task"])), seconds=seconds,
                         search=search.Grid.name if rungs is None else way.name, work=dataclasses.asdict(work),
                         cost=trials_cost(reported, work, request),
                         rung_steps=None if rungs is None else list(rungs.steps),
                         seeds=None if seeds is None else list(seeds),
                         checkpoints=None if seeds is None else [part.start for part in parts])
    print(f"stage {stage.index + 1} ({stage.task}): λ = {lam:g} chosen ({way.rule}), mean dev accuracy "
          f"{guidance.chosen_dev_text(record)} % (± its SE over {'the dev examples' if seeds is None else 'the seeds'}"
          f"); {len(reported)} trainings, {work.steps} optimizer steps in {seconds:.0f} s", flush=True)
    for line in guidance.choice_notes(record.trials, lam):
        print(f"  {line}", flush=True)
    return record


def candidate(lam: float, result: trials.TrialResult, seed: int | None = None) -> TrialRecord:
    """A λ trial's entry in the stage record: its dev mean, parts and flags at the end of the task (None when a search
    cut it: then its last rung's mean and parts, on the rung subset), its test mean (if tested), checkpoint, steps run
    and rung means; its seed in a grid of several."""
    metrics = result.metrics
    cut = {"cut_at_step": int(metrics["rung_step"]), "rung_dev_mean": metrics["rung_dev_mean"],
           "rung_dev_past": metrics.get("rung_dev_past"),
           "rung_dev_current": metrics["rung_dev_current"]} if jobs.RUNG in metrics else {}  # cut at this rung
    return TrialRecord(lam=lam, dev_mean=metrics.get("dev_mean"), dev_past=metrics.get("dev_past"),
                       dev_current=metrics.get("dev_current"), dev_flags=jobs.dev_flags(metrics),
                       test_mean=metrics.get("test_mean"), checkpoint=result.checkpoint,
                       steps=int(metrics.get("steps_run", 0)), rung_dev=metrics.get(jobs.RUNG_DEV), seed=seed, **cut)


def trials_cost(reported: list[dict], work: jobs.Work, request) -> dict:
    """What a stage's trials cost: trainings, optimizer steps (`work`, counted by the workers), wall seconds (each
    trial's training and evaluation as it reported them; a trial a halving search cut reported no end of task: Tune's
    `time_total_s` at its last rung) and device-hours (seconds × the devices of a trial: GPUs, else CPUs, over its
    workers)."""
    seconds = sum(metrics.get("seconds", metrics.get("time_total_s", 0.0)) for metrics in reported)
    devices = request.workers * (request.gpus or request.cpus)
    return {"trainings": len(reported), "optimizer_steps": work.steps, "seconds": seconds,
            "device_hours": devices * seconds / 3600, "device_unit": "GPU" if request.gpus else "CPU"}


def finish(folder: Storage, job: jobs.Job, records: list[StageRecord], request,
           model: folders.ModelRequest = folders.NO_MODEL, rule: str = selection.BEST,
           seeds: tuple[int, ...] | None = None) -> list[RunResults]:
    """Publish the run directory of each seed's last selected checkpoint (`run_dir`; with a0 → FWT; a plain-LoRA
    method's a0 is also the shared one → FWT last row; the merged model if asked, and the registration asked for),
    the trial tables, the report and its λ plots (`plots/`); the runs, in the order of the seeds."""
    publish = ray.remote(publishing.publish_checkpoint).options(num_cpus=request.cpus, num_gpus=request.gpus)
    runs = []
    for seed in seeds or (None,):
        baselines = [b for b in records[0].baselines if b.get("seed") == seed]
        runs.append(ray.get(publish.remote(stage_job(job, records, seed), checkpoint(records[-1].start(seed), folder),
                                           baselines, folder.uri, model.merged_model, run_dir(seed))))
        model.record(folder.child(run_dir(seed)))
    header, rows = trial_table(records)
    folder.write_text("grid_trials.csv", tables.csv_text(header, rows))
    with tempfile.TemporaryDirectory() as scratch:
        for record in records:
            if guidance.lambda_plotted(record):
                guidance.lambda_plot(record, Path(scratch) / guidance.lambda_plot_name(record))
        folder.upload(Path(scratch), PLOTS)
    folder.write_text("grid_report.md", report_text(records, runs, rule, markdown=True))
    return runs


def calibrate(job: jobs.Job, request) -> Rates:
    """`calibration.measure` as a Ray task with one worker's resources (the real model on the real device)."""
    from jumplora import calibration  # the model side: loaded only to calibrate

    cluster.connect()
    jobs.build_base(job)
    measure = ray.remote(calibration.measure).options(num_cpus=request.cpus, num_gpus=request.gpus)
    return ray.get(measure.remote(job.run, job.cache_dir))
