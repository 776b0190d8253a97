"""`grid_lambda.py --order N`: the per-task λ grid of SPEC §5 on Ray Tune.

Stage 1 trains task 1 (λ = 0) and, beside it, the single-task baselines a0 of tasks 2..T (for FWT; a0 of task 1 is
task 1's own first training, the same computation). Stage t ≥ 2 is one Tune experiment with a trial per λ of the
grid; every trial starts from the checkpoint (model and W_past) selected at stage t−1, trains task t and reports the
mean dev accuracy over tasks 1..t (and its dev examples' right / wrong flags): a trial evaluates the dev sets only,
since selection reads nothing else. The trial `--select` chooses (`jumplora.selection`: `best`, SPEC §5's highest
dev mean, ties to the smaller λ; or `1se`, the largest λ within one standard error of the best) is then evaluated
once on the test sets of tasks 1..t (its row of the accuracy matrix) and is the start of stage t+1
(`--test-all-trials` evaluates every trial's test sets instead, for the trial table).
After each stage the choice is appended to `<storage>/<name>/manifest.json`, so a resubmitted job skips finished
stages; a trial that finished is recorded at once (see `trials`), so a resubmitted job reruns only the unfinished
trials of an interrupted stage. At the end: the run directory of the last selected checkpoint (`run/`),
`grid_trials.csv`, `grid_report.md` and per stage a plot of the dev accuracy against λ (`lambda_taskNN.png`).
By concern: `stages` (the stages, λ packed into trials), `search` and `halving`, `manifest`, `grid_plan` (the plan
printed before a run), `grid_report` (the tables and report after it); this module parses and drives.

`--search halving` searches the λ of each stage t ≥ 2 by successive halving instead (`ray_jobs.halving`): the trials
are compared at rungs part-way through the task and only the best go on; the others stop early. The driver asks the
search (`ray_jobs.search.Search`) what a stage trains, when to compare, what to stop and which λ to keep. Each stage
records what its trials ran, counted by the workers (`jobs.Work`: optimizer steps, evaluated examples).

FWT last row is measured against plain LoRA's a0, one for every method (SPEC §4): a grid of an ELLA (plain LoRA) method
has it (its own a0), a grid of a JumpLoRA or EWC method has not (`fwt_last_row` null; `reproduce.py` trains it once per
seed for every method). `grid_report.md` ends with what the whole search cost: every trial's trainings, optimizer
steps, wall and device hours (`guidance.search_cost`)."""


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

from jumplora import continual, guidance, selection, spaces, tables, tracking
from jumplora.config import LAMBDA_GRID, RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.kinds import FRACTION, POSITIVE_INT, Items, Number
from jumplora.methods import METHODS, get_method
from jumplora.results import RunResults, StageRecord, TrialRecord
from jumplora.steps import steps_per_epoch
from jumplora.storage import GRID, RUN_DIR, Storage
from jumplora.tracking import folders
from ray_jobs import cli, cluster, jobs, publishing, search, trials
from ray_jobs.grid_plan import describe_plan
from ray_jobs.grid_report import PLOTS, report_text, trial_table
from ray_jobs.halving import Halving
from ray_jobs.manifest import Manifest, grid_identity
from ray_jobs.search import Search
from ray_jobs.stages import AUTO, Stage, one_lambda_only, pack, plan, stage_packing, trials_at_once, widest_stage

if TYPE_CHECKING:
    from jumplora.calibration import Rates

CHOSEN = "chosen"  # <stage>/chosen: the chosen trial's checkpoint with its test row, the start of the next stage


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineErrorParser(prog="grid_lambda.py", description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=POSITIVE_INT, required=True, help="task order")
    cli.add_run_options(parser, "grid")
    parser.add_argument("--grid", default=None, type=LAMBDA_GRID,
                        help="λ values, e.g. 1,1e3,1e5 (default: the method's own grid if it has one, else "
                             "search_spaces/lambda_grid.yaml)")
    parser.add_argument("--test-all-trials", action="store_true",
                        help="evaluate the test sets in every trial, not only the chosen one's (the trial table "
                             "then shows every trial's test accuracy; about a third more evaluation)")
    parser.add_argument("--lambdas-per-trial", type=Number(whole=True, low=1, words=(AUTO,)), default=AUTO,
                        help=f"λ of a stage trained together in one trial (one process, one base model, a stack of "
                             f"adapters; the same numbers); {AUTO} (default): on a CPU a stage's λ spread over the "
                             f"trials that run at once, one per trial on a GPU (until a stack's GPU memory is "
                             f"calibrated); 1: one λ per trial, the shortest wall time when the cluster holds a "
                             f"device per λ (ray_jobs/README.md)")
    parser.add_argument("--search", choices=search.SEARCHES, default="grid",
                        help="grid: every λ of a stage trains the whole task; halving: successive halving inside "
                             "each stage, the λ compared at rungs part-way, only the best go on (ray_jobs/README.md)")
    parser.add_argument("--select", choices=selection.RULES, default=selection.BEST,
                        help="the λ a stage keeps: " + "; ".join(f"{rule}: {text}" for rule, text in
                                                                  selection.DESCRIPTIONS.items())
                             + " (ray_jobs/README.md)")
    parser.add_argument("--rungs", default=None, type=Items(FRACTION, example="0.11,0.33"),
                        help="halving: rung fractions of a task's optimizer steps, e.g. 0.11,0.33 (default: "
                             "search_spaces/halving.yaml)")
    parser.add_argument("--eta", type=Number(whole=True, low=2), default=None,
                        help="halving: the best 1/η of the trials go on at a rung (default: "
                             "search_spaces/halving.yaml)")
    parser.add_argument("--rung-examples", type=POSITIVE_INT, default=None,
                        help="halving: dev examples of each seen task evaluated at a rung, a fixed seeded subset "
                             "(default: search_spaces/halving.yaml)")
    cli.add_trial_options(parser, "grid name (default: grid-order<N>-<method>-<threshold>-<delta>-<preset>-seed<S>)")
    parser.add_argument("--calibrate", action="store_true",
                        help="print the plan with an estimated time: a few training steps and an evaluation batch of "
                             "the model, timed on one trial's resources; trains nothing else")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config, job, stages = checked_grid(args)
    way = checked_search(args)
    only_one = one_lambda_only(config.method, way, args.test_all_trials)
    if args.lambdas_per_trial not in (AUTO, 1) and only_one:
        raise JumpLoRAError(f"--lambdas-per-trial {args.lambdas_per_trial}: {only_one}; leave the option out")
    settings = "".join(f"-{value}" for value in config.settings_values().values())
    name = args.name or (f"grid-order{config.order}-{config.method}-{config.threshold}{settings}-"
                         f"{args.preset}-seed{config.seed}{'' if way.name == 'grid' else '-' + way.name}"
                         f"{'' if way.rule == selection.BEST else '-' + way.rule}")
    storage = Storage(args.storage_path)
    if args.dry_run and not args.calibrate:
        request = cli.trial_request(args)
        concurrent = trials_at_once(args.max_concurrent, stages, request)
        check_fits(way, stages, concurrent or widest_stage(stages), request)  # as the run would
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name), args.test_all_trials,
                            search=way, per_trial=args.lambdas_per_trial))
        return 0
    if args.calibrate:
        request, concurrent = connect(args, job, stages, way)
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name), args.test_all_trials,
                            calibrate(job, request), way, args.lambdas_per_trial))
        return 0
    storage.check_writable()
    storage.check_own(name, GRID, cli.cache_dir(args), grid_identity(job, stages, way))
    tracker = tracking.from_args(args)
    with storage.lock(name, "grid_lambda.py"):
        request, concurrent = connect(args, job, stages, way)
        storage.mark(name, GRID, grid_identity(job, stages, way))
        cluster.warn_if_storage_not_shared(storage)
        log = folders.GridLog(tracker, name, storage.child(name), job.identity()["run"], [s.task for s in stages],
                            [list(s.lambdas) for s in stages], way.rule) if tracker else None
        run_grid(storage.child(name), job, stages, request, concurrent, log, args.test_all_trials, way,
                 args.lambdas_per_trial, folders.ModelRequest.of(args))
    return 0


def connect(args: argparse.Namespace, job: jobs.Job, stages: list[Stage],
            way: Search) -> tuple[cluster.WorkerRequest, int]:
    """Ray: one trial's resources and how many trials run at once, checked against the cluster (a halving search's
    λ all at once); the base built."""
    request = cli.trial_request(args)
    cluster.connect()
    concurrent = trials_at_once(args.max_concurrent, stages, request)
    cluster.check_fits(request, concurrent)
    check_fits(way, stages, concurrent, request)
    jobs.build_base(job)
    return request, concurrent


def check_fits(way: Search, stages: list[Stage], concurrent: int, request) -> None:
    """The search's stages t ≥ 2 on the cluster (`Search.check_fits`; stage 1 trains one λ)."""
    way.check_fits(max((len(stage.lambdas) for stage in stages[1:]), default=1), concurrent, request)


def checked_search(args: argparse.Namespace) -> Search:
    """`--search` with its `--select` rule: the grid, which refuses the halving options, or halving's layout
    (search_spaces/halving.yaml, then --rungs / --eta / --rung-examples)."""
    given = {option: value for option, value in (("--rungs", args.rungs), ("--eta", args.eta),
                                                 ("--rung-examples", args.rung_examples)) if value is not None}
    if args.search == "grid":
        if given:
            raise JumpLoRAError(f"{', '.join(given)} set(s) the halving search: add --search halving")
        return search.Grid(rule=args.select)
    if args.test_all_trials:
        raise JumpLoRAError("--test-all-trials tests every trial of the grid; a halving search stops most of them "
                            "early: leave it out, or use --search grid")
    default = spaces.halving()
    rungs = default["rungs"] if args.rungs is None else args.rungs
    eta = default["eta"] if args.eta is None else args.eta
    examples = default["rung_examples"] if args.rung_examples is None else args.rung_examples
    return Halving.checked(rungs, eta, examples, "--search halving:", args.select)


def checked_grid(args: argparse.Namespace) -> tuple[RunConfig, jobs.Job, list[Stage]]:
    """The configuration, the job and the stages, all checked before Ray is touched."""
    config = cli.run_config(args, "grid", order=args.order)
    if not get_method(config.method).per_task_lambda:
        with_lambda = ", ".join(name for name, spec in METHODS.items() if spec.per_task_lambda)
        raise JumpLoRAError(f"the λ grid needs a method with a per-task λ ({with_lambda}), got {config.method}")
    config = dataclasses.replace(config, lambdas=[0.0] * jobs.order_length(config))  # each stage sets its λ
    grid = spaces.method_grid(config.method) if args.grid is None else args.grid
    tasks = jobs.check(config, args.workers_per_trial)
    return config, jobs.Job(config, cli.cache_dir(args)), plan(tasks, grid)


def run_grid(folder: Storage, job: jobs.Job, stages: list[Stage], request, concurrent: int,
             log: folders.GridLog | None = None, test_all: bool = False, way: Search = search.PLAIN,
             per_trial: int | str = AUTO, model: folders.ModelRequest = folders.NO_MODEL) -> None:
    manifest = Manifest(folder, grid_identity(job, stages, way))
    if manifest.stages:  # a resubmitted grid
        print(f"{folder.uri}: stage(s) {', '.join(f'{r.task} ({r.task_name})' for r in manifest.stages)} finished "
              "before, skipped", flush=True)
    steps = task_steps(job.run, tuple(stage.task for stage in stages))
    packing = stage_packing(per_trial, stages, request, one_lambda_only(job.run.method, way, test_all), concurrent)
    for stage in stages[len(manifest.stages):]:
        manifest.add(run_stage(stage, job, manifest.stages, request, concurrent, folder, test_all, way,
                               way.rungs(stage.index, steps[stage.task]), packing[stage.index]))
        if log is not None:
            log.stage(manifest.stages[-1])
    results = finish(folder, job, manifest.stages, request, model, way.rule)
    if log is not None:
        log.end(manifest.stages)
    print(report_text(manifest.stages, results, way.rule))
    print(f"grid folder: {folder.uri}")


def task_steps(config: RunConfig, tasks: tuple[str, ...]) -> dict[str, int]:
    """The optimizer steps of each task's training, from the examples the run will load."""
    benchmark = continual.run_benchmark(config, tasks)
    return {task: steps_per_epoch(len(benchmark.tasks[task].train), config.batch_size) for task in tasks}


def stage_job(job: jobs.Job, records: list[StageRecord]) -> jobs.Job:
    """The job as seen by a stage: λ of the finished tasks as chosen, the others 0 (a trial sets its own)."""
    lambdas = [record.selected_lam for record in records]
    return job.with_lambdas(lambdas + [0.0] * (len(job.run.lambdas) - len(lambdas)))


def checkpoint(path: str | None, folder: Storage):
    return ray.train.Checkpoint(path, filesystem=folder.fs) if path else None


def run_stage(stage: Stage, job: jobs.Job, records: list[StageRecord], request, concurrent: int, folder: Storage,
              test_all: bool = False, way: Search = search.PLAIN, rungs: jobs.Rungs | None = None,
              per_trial: int = 1) -> StageRecord:
    """Stage `stage`'s trials, `per_trial` λ in each (`way` compares its λ at `rungs` and stops some), the one it
    chooses, its test row; the stage's record: per λ, however they were packed."""
    started = time.monotonic()
    start = checkpoint(records[-1].checkpoint, folder) if records else None
    this_job = stage_job(job, records)
    stage_trials = stage.trials(this_job, test=test_all, rungs=rungs)
    lambda_trials = [trial for trial in stage_trials if isinstance(trial.work, jobs.Sequence)]
    lambdas = {trial.id: trial.job.run.lambdas[stage.index] for trial in lambda_trials}
    finished = trials.recorded(folder, stage.name, [result for trial in stage_trials for result in trial.results])
    running = pack(stage, this_job, stage_trials, per_trial, finished, folder.child(stage.name))
    at_once = min(concurrent, len(running))
    print(f"stage {stage.index + 1} ({stage.task}): {len(stage_trials)} trainings in {len(running)} trial(s), "
          f"{at_once} at a time" + (f", compared after steps {', '.join(map(str, rungs.steps))}" if rungs else ""),
          flush=True)
    results = trials.run_trials(stage.name, running, request, at_once, folder, start=start,
                                scheduler=way.scheduler(rungs, lambdas))
    candidates = [candidate(lambdas[trial.id], results[trial.id]) for trial in lambda_trials]
    chosen = way.choose(candidates)
    for found in candidates:
        found.selected = found is chosen
    start_of_next = chosen.checkpoint
    work = sum((jobs.Work.from_metrics(result.metrics) for result in results.values()), jobs.Work())
    if not test_all:  # the chosen trial's row of the test accuracy matrix, evaluated once
        test_row = ray.remote(publishing.with_test_row).options(num_cpus=request.cpus, num_gpus=request.gpus)
        trial = lambda_trials[candidates.index(chosen)]
        start_of_next, row, tested = ray.get(test_row.remote(trial.job, checkpoint(chosen.checkpoint, folder),
                                                             folder.child(stage.name).uri, CHOSEN))
        chosen.test_mean = math.fsum(row) / len(row)
        work += jobs.Work(test_examples=tested)
    baselines = [{"task": trial.work.task + 1, **{key: results[trial.id].metrics.get(key)
                                                  for key in ("a0", "a0_flags", "seconds", "steps")}}
                 for trial in stage_trials if isinstance(trial.work, jobs.SingleTask)]
    seconds = time.monotonic() - started
    print(f"stage {stage.index + 1} ({stage.task}): λ = {chosen.lam:g} chosen ({way.rule}), mean dev accuracy "
          f"{100 * chosen.dev_mean:.2f} %; {len(stage_trials)} trainings, {work.steps} optimizer steps in "
          f"{seconds:.0f} s", flush=True)
    for line in guidance.choice_notes(candidates, chosen.lam):
        print(f"  {line}", flush=True)
    return StageRecord(task=stage.index + 1, task_name=stage.task, selected_lam=chosen.lam,
                       checkpoint=start_of_next, trials=sorted(candidates, key=lambda c: c.lam),
                       baselines=sorted(baselines, key=lambda b: b["task"]), seconds=seconds,
                       search=search.Grid.name if rungs is None else way.name, work=dataclasses.asdict(work),
                       cost=trials_cost([results[trial.id].metrics for trial in stage_trials], work, request),
                       rung_steps=None if rungs is None else list(rungs.steps))


def candidate(lam: float, result: trials.TrialResult) -> TrialRecord:
    """A λ trial's entry in the stage record: its dev mean, parts and flags at the end of the task (None when a search
    cut it: then its last rung's mean and parts, on the rung subset), its test mean (if tested), checkpoint, steps run
    and rung means."""
    metrics = result.metrics
    entry = TrialRecord(lam=lam, dev_mean=metrics.get("dev_mean"), dev_past=metrics.get("dev_past"),
                        dev_current=metrics.get("dev_current"), dev_flags=jobs.dev_flags(metrics),
                        test_mean=metrics.get("test_mean"),
                        checkpoint=result.checkpoint, steps=int(metrics.get("steps_run", 0)),
                        rung_dev=metrics.get(jobs.RUNG_DEV))
    if jobs.RUNG in metrics:  # cut at this rung
        entry = dataclasses.replace(entry, cut_at_step=int(metrics["rung_step"]),
                                    rung_dev_mean=metrics["rung_dev_mean"], rung_dev_past=metrics.get("rung_dev_past"),
                                    rung_dev_current=metrics["rung_dev_current"])
    return entry


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
           model: folders.ModelRequest = folders.NO_MODEL, rule: str = selection.BEST) -> RunResults:
    """Publish the run directory of the last selected checkpoint (with a0 → FWT; a plain-LoRA method's a0 is also the
    shared one → FWT last row; the merged model if asked, and the registration asked for), the trial tables, the
    report and its λ plots (`plots/`)."""
    publish = ray.remote(publishing.publish_checkpoint).options(num_cpus=request.cpus, num_gpus=request.gpus)
    results = ray.get(publish.remote(stage_job(job, records), checkpoint(records[-1].checkpoint, folder),
                                     records[0].baselines, folder.uri, model.merged_model))
    model.record(folder.child(RUN_DIR))
    header, rows = trial_table(records)
    folder.write_text("grid_trials.csv", tables.csv_text(header, rows))
    with tempfile.TemporaryDirectory() as scratch:
        for record in records:
            if guidance.lambda_plotted(record):
                guidance.lambda_plot(record, Path(scratch) / guidance.lambda_plot_name(record))
        folder.upload(Path(scratch), PLOTS)
    folder.write_text("grid_report.md", report_text(records, results, rule, markdown=True))
    return results


def calibrate(job: jobs.Job, request) -> Rates:
    """`calibration.measure` as a Ray task with one worker's resources (the real model on the real device)."""
    from jumplora import calibration  # the model side: loaded only to calibrate

    measure = ray.remote(calibration.measure).options(num_cpus=request.cpus, num_gpus=request.gpus)
    return ray.get(measure.remote(job.run, job.cache_dir))
