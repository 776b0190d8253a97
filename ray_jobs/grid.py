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

`--search halving` searches the λ of each stage t ≥ 2 by successive halving instead (`ray_jobs.halving`): the trials
are compared at rungs part-way through the task and only the best go on; the others stop early. Each stage records
what its trials ran, counted by the workers (`jobs.Work`: optimizer steps, evaluated examples).

FWT last row is measured against plain LoRA's a0, one for every method (SPEC §4): a grid of an ELLA (plain LoRA) method
has it (its own a0), a grid of a JumpLoRA or EWC method has not (`fwt_last_row` null; `reproduce.py` trains it once per
seed for every method). `grid_report.md` ends with what the whole search cost: every trial's trainings, optimizer
steps, wall and device hours (`guidance.search_cost`)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ray
import ray.train

from jumplora import calibration, continual, selection, spaces, tables
from jumplora.config import LAMBDA_GRID, RunConfig
from jumplora.cost import Cost
from jumplora.errors import JumpLoRAError
from jumplora.kinds import FRACTION, POSITIVE_INT, Items, Number
from jumplora.methods import METHODS, get_method
from jumplora.methods.registry import plan_settings
from jumplora.outputs import format_summary
from jumplora.results import RunResults, StageRecord, TrialRecord, read_manifest
from jumplora.training import steps_per_epoch
from ray_jobs import cli, cluster, costs, guidance, halving, jobs, track, trials
from ray_jobs.storage import GRID, Storage

MANIFEST = track.MANIFEST
SELECT = track.SELECT  # the manifest job's key of a rule other than `best` (`track.selection_rule`)
CHOSEN = "chosen"  # <stage>/chosen: the chosen trial's checkpoint with its test row, the start of the next stage
SEARCHES = ("grid", "halving")
AUTO = "auto"  # --lambdas-per-trial: as many λ per trial as one device holds (`lambdas_per_trial`)
PLOTS = "plots"  # <grid>/plots/lambda_taskNN.png: a stage's dev accuracy against λ (`guidance.lambda_plot`)


@dataclass(frozen=True)
class Stage:
    """Task `index` (0-based) trained with each λ of `lambdas`, plus single-task baselines of tasks `baselines`."""

    index: int
    task: str
    lambdas: tuple[float, ...]
    baselines: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return f"task{self.index + 1:02d}"

    def trials(self, job: jobs.Job, test: bool = False, rungs: jobs.Rungs | None = None) -> list[jobs.Trial]:
        """One trial per λ (task `index` trained with it, from the stage's start; test sets evaluated only if `test`;
        compared at `rungs` by a search), then the single-task baselines."""
        found = [jobs.Trial(f"{self.name}-lam{lam:g}", job.with_lambda(self.index, lam),
                            jobs.Sequence(self.index + 1, test=test, rungs=rungs)) for lam in self.lambdas]
        return found + [jobs.Trial(f"a0-task{j + 1:02d}", job, jobs.SingleTask(j)) for j in self.baselines]


def plan(tasks: tuple[str, ...], grid: list[float]) -> list[Stage]:
    first = Stage(0, tasks[0], (0.0,), tuple(range(1, len(tasks))))
    return [first] + [Stage(t, tasks[t], tuple(grid)) for t in range(1, len(tasks))]


def select(trials: list[TrialRecord], rule: str = selection.BEST) -> TrialRecord:
    """The trial `rule` chooses (`selection.choose`; `best`: the highest mean dev accuracy over the seen tasks, ties
    to the smaller λ). Trials a search stopped early (no `dev_mean`) are not candidates."""
    lam = selection.choose(guidance.standings(trials), rule)
    return next(trial for trial in trials if trial.lam == lam and trial.dev_mean is not None)


class Manifest:
    """`manifest.json`: the grid's identity and one record per finished stage (`StageRecord`: trials, choice,
    checkpoint)."""

    def __init__(self, folder: Storage, identity: dict) -> None:
        self.folder = folder
        data = folder.read_json(MANIFEST) if folder.exists(MANIFEST) else {"job": identity, "stages": []}
        self.job, self.stages = read_manifest(data, f"{folder.uri}/{MANIFEST}")
        if self.job != identity:
            raise JumpLoRAError(f"{folder.uri} holds a grid of another configuration: pass another --name")

    def add(self, record: StageRecord) -> None:
        self.stages.append(record)
        self.folder.write_json(MANIFEST, {"job": self.job, "stages": [stage.to_json() for stage in self.stages]})


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
    parser.add_argument("--search", choices=SEARCHES, default="grid",
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


def lambdas_per_trial(setting: int | str, n: int, request, one_only: bool, slots: int = 1) -> int:
    """λ per trial of a stage of `n` λ: `setting`, at most n; `auto`: on a CPU the n λ spread over the `slots`
    trials the cluster runs at once, ⌈n / slots⌉ each (the fewest processes that keep every slot busy: a CPU step is
    compute-bound, so a stack gains the set-up it pays once, not speed), one on a GPU (a stack's peak memory is not
    calibrated yet, see DECISIONS). One when `one_only` (`one_lambda_only`)."""
    if one_only:
        return 1
    if setting == AUTO:
        return 1 if request.gpus else -(-n // max(1, min(slots, n)))
    return min(setting, n)


def one_lambda_only(method: str, search: halving.Halving | None, test_all: bool) -> str | None:
    """Why a grid trains one λ per trial, or None: a group trains its λ to the end and evaluates dev only, and saves
    each λ's checkpoint from its records (a method that trains every weight would need each λ's whole model)."""
    if search is not None:
        return "a halving search trains one λ per trial"
    if test_all:
        return "--test-all-trials trains one λ per trial"
    if not continual.stacks(method):
        return f"{method} trains every weight: one λ per trial"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config, job, stages = checked_grid(args)
    search = checked_search(args)
    only_one = one_lambda_only(config.method, search, args.test_all_trials)
    if args.lambdas_per_trial not in (AUTO, 1) and only_one:
        raise JumpLoRAError(f"--lambdas-per-trial {args.lambdas_per_trial}: {only_one}; leave the option out")
    settings = "".join(f"-{value}" for value in config.settings_values().values())
    name = args.name or (f"grid-order{config.order}-{config.method}-{config.threshold}{settings}-"
                         f"{args.preset}-seed{config.seed}{'-halving' if search else ''}"
                         f"{'' if args.select == selection.BEST else '-' + args.select}")
    storage = Storage(args.storage_path)
    if args.dry_run and not args.calibrate:
        request = cli.trial_request(args)
        concurrent = trials_at_once(args.max_concurrent, stages, request)
        check_search_fits(search, stages, concurrent or widest_stage(stages), request)  # as the run would
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name), args.test_all_trials,
                            search=search, per_trial=args.lambdas_per_trial, rule=args.select))
        return 0
    if args.calibrate:
        request, concurrent = connect(args, job, stages, search)
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name), args.test_all_trials,
                            calibrate(job, request), search, args.lambdas_per_trial, args.select))
        return 0
    storage.check_writable()
    storage.check_own(name, GRID, cli.cache_dir(args), grid_identity(job, stages, search, args.select))
    tracker = track.tracker(args)
    with storage.lock(name, "grid_lambda.py"):
        request, concurrent = connect(args, job, stages, search)
        storage.mark(name, GRID, grid_identity(job, stages, search, args.select))
        cluster.warn_if_storage_not_shared(storage)
        log = track.GridLog(tracker, name, storage.child(name), job.identity()["run"], [s.task for s in stages],
                            [list(s.lambdas) for s in stages], args.select) if tracker else None
        run_grid(storage.child(name), job, stages, request, concurrent, log, args.test_all_trials, search,
                 args.lambdas_per_trial, track.ModelRequest.of(args), args.select)
        storage.seal(name, GRID)
    return 0


def connect(args: argparse.Namespace, job: jobs.Job, stages: list[Stage],
            search: halving.Halving | None) -> tuple[cluster.WorkerRequest, int]:
    """Ray: one trial's resources and how many trials run at once, checked against the cluster (a halving search's
    λ all at once); the base built."""
    request = cli.trial_request(args)
    cluster.connect()
    concurrent = trials_at_once(args.max_concurrent, stages, request)
    cluster.check_fits(request, concurrent)
    check_search_fits(search, stages, concurrent, request)
    jobs.build_base(job)
    return request, concurrent


def trials_at_once(max_concurrent: int | None, stages: list[Stage], request) -> int | None:
    """How many trials run at once: `--max-concurrent`, else as many of the widest stage's as the Ray cluster holds;
    None where this process has no Ray to ask (a dry run with --gpus-per-worker given starts none). The run and its
    plan both count with it: `auto` packs a stage's λ by it (`stage_packing`)."""
    if max_concurrent:
        return max_concurrent
    if not ray.is_initialized():
        return None
    return min(widest_stage(stages), cluster.max_concurrent(request))


def stage_packing(setting: int | str, stages: list[Stage], request, only_one: str | None,
                  concurrent: int | None) -> list[int]:
    """λ per trial of each stage (`lambdas_per_trial`) with `concurrent` trials at once (`trials_at_once`; None: a
    stage's trials all at once, as a plan without Ray counts); `only_one`: `one_lambda_only`'s reason. The run packs
    by it and its plan prints it."""
    slots = concurrent or widest_stage(stages)
    return [lambdas_per_trial(setting, len(stage.lambdas), request, only_one is not None, slots) for stage in stages]


def check_search_fits(search: halving.Halving | None, stages: list[Stage], concurrent: int, request) -> None:
    """A halving search runs a stage's λ all at once, each in one process (`halving.check_concurrency`)."""
    if search is not None:
        halving.check_concurrency(max((len(stage.lambdas) for stage in stages[1:]), default=1), concurrent, request)


def checked_search(args: argparse.Namespace) -> halving.Halving | None:
    """`--search halving`'s layout (search_spaces/halving.yaml, then --rungs / --eta / --rung-examples), or None for
    the grid, which refuses those options."""
    given = {option: value for option, value in (("--rungs", args.rungs), ("--eta", args.eta),
                                                 ("--rung-examples", args.rung_examples)) if value is not None}
    if args.search == "grid":
        if given:
            raise JumpLoRAError(f"{', '.join(given)} set(s) the halving search: add --search halving")
        return None
    if args.test_all_trials:
        raise JumpLoRAError("--test-all-trials tests every trial of the grid; a halving search stops most of them "
                            "early: leave it out, or use --search grid")
    default = spaces.halving()
    rungs = default["rungs"] if args.rungs is None else args.rungs
    eta = default["eta"] if args.eta is None else args.eta
    examples = default["rung_examples"] if args.rung_examples is None else args.rung_examples
    return halving.Halving.checked(rungs, eta, examples, "--search halving:")


def widest_stage(stages: list[Stage]) -> int:
    """The most trials of a stage: more at once would never run."""
    return max(len(stage.lambdas) + len(stage.baselines) for stage in stages)


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


def grid_identity(job: jobs.Job, stages: list[Stage], search: halving.Halving | None, rule: str) -> dict:
    """What must match for a grid to resume another's folder (its manifest's `job`, its marker's digest)."""
    identity = {**job.identity(), "lambdas_tried": [list(stage.lambdas) for stage in stages]}
    if search is not None:  # a grid's identity stays as it was, so that its folder resumes; JSON values (lists)
        identity["search"] = {"halving": search.to_dict()}
    if rule != selection.BEST:  # likewise: the manifest's record of the rule (`selection_rule`), another grid
        identity[SELECT] = rule
    return identity


def run_grid(folder: Storage, job: jobs.Job, stages: list[Stage], request, concurrent: int,
             log: track.GridLog | None = None, test_all: bool = False, search: halving.Halving | None = None,
             per_trial: int | str = AUTO, model: track.ModelRequest = track.NO_MODEL,
             rule: str = selection.BEST) -> None:
    manifest = Manifest(folder, grid_identity(job, stages, search, rule))
    if manifest.stages:  # a resubmitted grid
        print(f"{folder.uri}: stage(s) {', '.join(f'{r.task} ({r.task_name})' for r in manifest.stages)} finished "
              "before, skipped", flush=True)
    steps = task_steps(job.run, tuple(stage.task for stage in stages)) if search is not None else {}
    packing = stage_packing(per_trial, stages, request, one_lambda_only(job.run.method, search, test_all), concurrent)
    for stage in stages[len(manifest.stages):]:
        rungs = search.rungs(steps[stage.task]) if search is not None and stage.index > 0 else None
        manifest.add(run_stage(stage, job, manifest.stages, request, concurrent, folder, test_all, search, rungs,
                               packing[stage.index], rule))
        if log is not None:
            log.stage(manifest.stages[-1])
    results = finish(folder, job, manifest.stages, request, model, rule)
    if log is not None:
        log.end(manifest.stages)
    print(report_text(manifest.stages, results, rule))
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
              test_all: bool = False, search: halving.Halving | None = None,
              rungs: jobs.Rungs | None = None, per_trial: int = 1, rule: str = selection.BEST) -> StageRecord:
    """Stage `stage`'s trials, `per_trial` λ in each (a search compares its λ at `rungs`), the choice by `rule`, its
    test row; the stage's record: per λ, however they were packed."""
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
    scheduler = None
    if rungs is not None and rungs.steps:
        def scheduler(recorded: dict[str, trials.TrialResult]) -> halving.SynchronousHalving:
            known = {trial_id: result.metrics.get(jobs.RUNG_DEV, []) for trial_id, result in recorded.items()}
            return halving.SynchronousHalving(search, len(rungs.steps), lambdas, known)
    results = trials.run_trials(stage.name, running, request, at_once, folder, start=start, scheduler=scheduler)
    candidates = [candidate(lambdas[trial.id], results[trial.id]) for trial in lambda_trials]
    chosen = select(candidates, rule)
    for found in candidates:
        found.selected = found is chosen
    start_of_next = chosen.checkpoint
    work = sum((jobs.Work.from_metrics(result.metrics) for result in results.values()), jobs.Work())
    if not test_all:  # the chosen trial's row of the test accuracy matrix, evaluated once
        test_row = ray.remote(trials.with_test_row).options(num_cpus=request.cpus, num_gpus=request.gpus)
        trial = lambda_trials[candidates.index(chosen)]
        start_of_next, row, tested = ray.get(test_row.remote(trial.job, checkpoint(chosen.checkpoint, folder),
                                                             folder.child(stage.name).uri, CHOSEN))
        chosen.test_mean = math.fsum(row) / len(row)
        work += jobs.Work(test_examples=tested)
    baselines = [{"task": trial.work.task + 1, **{key: results[trial.id].metrics.get(key)
                                                  for key in ("a0", "a0_flags", "seconds", "steps")}}
                 for trial in stage_trials if isinstance(trial.work, jobs.SingleTask)]
    seconds = time.monotonic() - started
    print(f"stage {stage.index + 1} ({stage.task}): λ = {chosen.lam:g} chosen ({rule}), mean dev accuracy "
          f"{100 * chosen.dev_mean:.2f} %; {len(stage_trials)} trainings, {work.steps} optimizer steps in "
          f"{seconds:.0f} s", flush=True)
    return StageRecord(task=stage.index + 1, task_name=stage.task, selected_lam=chosen.lam,
                       checkpoint=start_of_next, trials=sorted(candidates, key=lambda c: c.lam),
                       baselines=sorted(baselines, key=lambda b: b["task"]), seconds=seconds,
                       search="grid" if rungs is None else "halving", work=dataclasses.asdict(work),
                       cost=trials_cost([results[trial.id].metrics for trial in stage_trials], work, request),
                       rung_steps=None if rungs is None else list(rungs.steps))


def pack(stage: Stage, job: jobs.Job, stage_trials: list[jobs.Trial], per_trial: int, finished: set[str],
         folder: Storage) -> list[jobs.Trial]:
    """The trials to run: the stage's λ not `finished` yet, `per_trial` to a trial (in grid order; a group of one is
    that λ's own trial), a group's λ checkpoints in its trial folder under `folder`; the others as they are (a
    finished one is skipped by `trials.run_trials`)."""
    todo = [trial for trial in stage_trials if isinstance(trial.work, jobs.Sequence) and trial.id not in finished]
    todo_ids = {trial.id for trial in todo}
    packed = []
    for first in range(0, len(todo), per_trial):
        group = todo[first: first + per_trial]
        if len(group) == 1:
            packed += group
            continue
        lams = tuple(trial.job.run.lambdas[stage.index] for trial in group)
        group_id = f"{stage.name}-lams-{'-'.join(f'{lam:g}' for lam in lams)}"
        packed.append(jobs.Trial(group_id, job, jobs.LambdaGroup(stage.index, lams, tuple(t.id for t in group),
                                                                 folder.child(group_id).uri)))
    return [trial for trial in stage_trials if trial.id not in todo_ids] + packed


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
           model: track.ModelRequest = track.NO_MODEL, rule: str = selection.BEST) -> RunResults:
    """Publish the run directory of the last selected checkpoint (with a0 → FWT; a plain-LoRA method's a0 is also the
    shared one → FWT last row; the merged model if asked, and the registration asked for), the trial tables, the
    report and its λ plots (`plots/`)."""
    first = records[0]
    a0_cost = Cost(len(first.baselines), sum(b.get("steps") or 0 for b in first.baselines),
                   sum(b.get("seconds") or 0.0 for b in first.baselines))
    baselines = functools.partial(continual.SingleTaskBaselines.after_first, [b["a0"] for b in first.baselines],
                                  [b.get("a0_flags") for b in first.baselines],
                                  get_method(job.run.method).adapter is continual.SHARED_ADAPTER, a0_cost)
    publish = ray.remote(trials.publish_checkpoint).options(num_cpus=request.cpus, num_gpus=request.gpus)
    results = ray.get(publish.remote(stage_job(job, records), checkpoint(records[-1].checkpoint, folder),
                                     baselines, folder.uri, model.merged_model))
    model.record(folder.child(track.RUN_DIR))
    header, rows = trial_table(records)
    folder.write_text("grid_trials.csv", tables.csv_text(header, rows))
    with tempfile.TemporaryDirectory() as scratch:
        for record in records:
            if guidance.lambda_plotted(record):
                guidance.lambda_plot(record, Path(scratch) / guidance.lambda_plot_name(record))
        folder.upload(Path(scratch), PLOTS)
    folder.write_text("grid_report.md", report_text(records, results, rule, markdown=True))
    return results


def pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f}"


def trial_table(records: list[StageRecord]) -> tuple[list[str], list[list]]:
    """Every λ trial: its dev accuracy (and past / current parts) at its last evaluation, where that was, the
    standard error of its dev mean's paired difference to the best λ's and whether the data can tell it from the best
    (`guidance.standings`; blank for a trial cut by a search or recorded without dev flags), its test accuracy
    (chosen trials, or every trial with --test-all-trials), its optimizer steps."""
    header = ["task", "task_name", "lambda", "dev_accuracy_seen_pct", "dev_past_pct", "dev_current_pct",
              "evaluated_at", "dev_se_to_best_pct", "within_1se_of_best", "test_accuracy_seen_pct", "optimizer_steps",
              "selected"]
    rows = []
    for r in records:
        found = {standing.lam: standing for standing in guidance.standings(r.trials)}
        for c in r.trials:
            mean, past, current, where = guidance.last_dev(c)
            standing = found.get(c.lam) if c.dev_mean is not None else None
            se = pct(standing.se) if standing else ""
            within = "yes" if standing and standing.within else "no" if standing and standing.se is not None else ""
            rows.append([r.task, r.task_name, f"{c.lam:g}", pct(mean), pct(past), pct(current), where, se, within,
                         pct(c.test_mean), "" if c.steps is None else c.steps, "yes" if c.selected else ""])
    return header, rows


def lambda_table(record: StageRecord) -> str:
    """A stage's λ on one line: each λ's mean dev accuracy (%) ± the SE of its paired difference to the best λ's
    (points), `=` where the data cannot tell it from the best (within one SE), `*` the chosen one."""
    cells = []
    for standing in guidance.standings(record.trials):
        se = "" if standing.se is None else f" ± {100 * standing.se:.2f}"
        marks = ("=" if standing.within else "") + ("*" if standing.lam == record.selected_lam else "")
        cells.append(f"{standing.lam:g}: {100 * standing.dev_mean:.2f}{se}{' ' + marks if marks else ''}")
    return "; ".join(cells)


def report_text(records: list[StageRecord], results: RunResults, rule: str = selection.BEST,
                markdown: bool = False) -> str:
    """The grid's report: each stage's λ chosen by `rule` with every λ's standing, the run's summary, what the
    stages ran and cost; in `markdown` (grid_report.md) also every trial and the λ plots."""
    chosen = tables.markdown(["task", "name", "λ chosen", "mean dev accuracy over tasks 1..t (%)",
                              "each λ: mean dev accuracy (%) ± SE of its difference to the best (points)"],
                             [[r.task, r.task_name, f"{r.selected_lam:g}", f"{100 * r.chosen.dev_mean:.2f}",
                               lambda_table(r) if guidance.lambda_plotted(r) else ""]
                              for r in records])
    total = guidance.search_cost(records)
    parts = [f"λ chosen per task by --select {rule} ({selection.DESCRIPTIONS[rule]}); = : the data cannot tell the "
             "λ from the best (within one standard error of the paired difference), * : chosen:", chosen,
             format_summary(results), "what each stage ran (counted by the workers):", work_table(records),
             f"the whole search: {total['trainings']} trainings, {total['optimizer_steps']} optimizer steps, "
             f"{total['seconds'] / 3600:.3f} h of trials, {total['device_hours']:.3f} {total['device_unit']}-hours "
             "(every trial's training and evaluation; the chosen trials' test rows and the driver not included)"]
    if markdown:
        parts += ["every trial:", tables.markdown(*trial_table(records)), "mean dev accuracy against λ per stage "
                  f"(past tasks, current task, the band within {100 * guidance.NEAR_BEST:g} point of the best):"]
        parts += [f"![{r.task_name}]({PLOTS}/{guidance.lambda_plot_name(r)})"
                  for r in records if guidance.lambda_plotted(r)]
    return "\n".join(parts)


def work_table(records: list[StageRecord]) -> str:
    """Per stage: the search, trainings started, optimizer steps run, dev and test examples evaluated, seconds."""
    works = [jobs.Work(**r.work) if r.work is not None else None for r in records]  # None: finished before counts
    trainings = [len(r.trials) + len(r.baselines) for r in records]
    rows = [[r.task, r.task_name, r.search or "grid", n,
             *([work.steps, work.dev_examples, work.test_examples] if work else ["", "", ""]), f"{r.seconds:.0f}"]
            for r, work, n in zip(records, works, trainings, strict=True)]
    total = sum((work for work in works if work), jobs.Work())
    rows.append(["total", "", "", sum(trainings), total.steps,
                 total.dev_examples, total.test_examples, f"{sum(r.seconds for r in records):.0f}"])
    return tables.markdown(["stage", "task", "search", "trainings", "optimizer steps", "dev examples",
                            "test examples", "seconds"], rows)


def describe_plan(job: jobs.Job, preset: str, stages: list[Stage], request, concurrent: int | None,
                  folder: Storage, test_all: bool = False, rates: calibration.Rates | None = None,
                  search: halving.Halving | None = None, per_trial: int | str = AUTO,
                  rule: str = selection.BEST) -> str:
    """The stages and their trials, packed as the run packs them (`stage_packing`, `pack`; `concurrent` trials at
    once, `trials_at_once`), the rule that chooses their λ, what each costs (`costs`) in the chosen search and the
    steps and evaluations of both searches, the λ per trial and both packings' trials and process starts, the
    resources and, when calibrated, the estimated time of each packing."""
    config = job.run
    only_one = one_lambda_only(config.method, search, test_all)
    packing = stage_packing(per_trial, stages, request, only_one, concurrent)
    n_trials = [len(pack(stage, job, stage.trials(job, test=test_all), k, set(), folder.child(stage.name)))
                for stage, k in zip(stages, packing, strict=True)]
    lines = [f"λ {'search by successive halving' if search else 'grid'} of order {config.order} "
             f"({', '.join(s.task for s in stages)}): {config.method}, "
             f"{plan_settings(config) or 'no settings of its own'}, seed {config.seed}, preset {preset} (model "
             f"{config.model}); data: {config.data_dir or 'the synthetic benchmark'}"]
    for stage, n in zip(stages, n_trials, strict=True):
        what = f"λ ∈ {{{', '.join(f'{lam:g}' for lam in stage.lambdas)}}}"
        if stage.baselines:
            what += f", and single-task baselines of tasks {stage.baselines[0] + 1}..{stage.baselines[-1] + 1}"
        start = "the base model" if stage.index == 0 else f"the model chosen at stage {stage.index}"
        lines.append(f"stage {stage.index + 1}: task {stage.index + 1} {stage.task}: {what}; from {start}; "
                     f"{len(stage.lambdas) + len(stage.baselines)} trainings in {n} trial(s)")
    lines.append(f"each stage keeps the λ that --select {rule} chooses: {selection.DESCRIPTIONS[rule]}")
    sizes = costs.split_sizes(job.run, tuple(stage.task for stage in stages), Path(job.cache_dir))
    if search is not None:  # rungs that a short task puts on one step are planned (and run) as one
        for stage in stages[1:]:
            note = search.merged(steps_per_epoch(sizes[stage.task]["train"].examples, config.batch_size))
            lines += [f"stage {stage.index + 1}: {note}"] if note else []
    try:  # the one given, else halving.yaml's: both are compared
        halving_layout, unread = search or halving.Halving.default(), None
    except JumpLoRAError as error:  # only the halving search reads halving.yaml: a grid's plan goes on without it
        halving_layout, unread = None, f"(--search halving not compared: {error})"
    both = {mode: plan_costs(job, stages, test_all, layout, sizes)
            for mode, layout in (("grid", None), ("halving", halving_layout)) if mode == "grid" or layout}
    stage_costs = both["halving" if search else "grid"]
    lines.append(costs.table([(str(s.index + 1), s.task) for s in stages], stage_costs))
    total = sum(stage_costs, costs.Cost())
    device = "GPU" if request.gpus else "CPU"
    lines.append(f"{total.trainings} trainings of one task each; per trial {request.describe()} (training on "
                 f"{device}); {concurrent or 'as many as the cluster holds'} at once")
    n_lambdas, baselines = [len(s.lambdas) for s in stages], [len(s.baselines) for s in stages]
    starts = [costs.process_starts(n, request.workers, concurrent or n, not test_all) for n in n_trials]
    lines.append(f"worker processes started (each pays the device's cold start once; on a CPU Ray may reuse a "
                 f"task's): {sum(starts) + 1} (per stage {', '.join(map(str, starts))}; 1 to publish)")
    lines.append(unread or compare_searches(both, halving_layout, test_all))
    lines.append(describe_packing(per_trial, packing, only_one, request.gpus > 0, concurrent))
    packings = [costs.Packing("1", [1] * len(stages)), costs.Packing("stacked", n_lambdas)]
    lines.append(costs.compare_packings(packings, n_lambdas, baselines, stage_costs, request, concurrent,
                                        not test_all, rates))
    if rates is not None:
        lines.append(costs.estimate(total, rates, concurrent or 1, request.total_gpus, sum(starts) + 1))
    lines.append(f"storage: {folder.uri}")
    return "\n".join(lines)


def describe_packing(setting: int | str, packing: list[int], only_one: str | None, gpu: bool,
                     concurrent: int | None) -> str:
    """How the run packs the λ of its stages t ≥ 2 (stage 1 trains one λ; `stage_packing`), and why when it cannot
    stack them; `auto` on a CPU also says by how many trials at once, or that a plan without Ray did not know."""
    if only_one:
        return f"λ per trial: 1 ({only_one})"
    if gpu and setting == AUTO:
        return ("λ per trial: 1 (auto on a GPU, until a stack's peak memory per λ is calibrated; "
                "--lambdas-per-trial K stacks K)")
    sizes = "/".join(map(str, sorted(set(packing[1:])))) or "1"
    why = ""
    if setting == AUTO:
        why = (f": a stage's λ spread over the {concurrent} trial(s) at once" if concurrent else
               ": a stage's λ spread over the trials at once, here all of a stage's: a dry run with --gpus-per-worker "
               "given asks no Ray how many the cluster holds; --max-concurrent N plans N")
    return (f"λ per trial: {sizes} (--lambdas-per-trial {setting}{why}); a trial of several λ trains them as one "
            f"stack, from one start, in one process")


def compare_searches(both: dict[str, list[costs.Cost]], layout: halving.Halving, test_all: bool) -> str:
    """Optimizer steps (and their worth in whole trainings) and evaluated examples of the grid and of halving."""
    grid_total = sum(both["grid"], costs.Cost())
    trainings = sum(c.steps / (g.steps / g.trainings) for c, g in zip(both["halving"], both["grid"], strict=True))
    lines = ["expected work of each search (--search):"]
    for mode, stage_costs in both.items():
        total = sum(stage_costs, costs.Cost())
        worth = grid_total.trainings if mode == "grid" else trainings
        share = f" ({100 * total.steps / grid_total.steps:.0f} % of the grid's steps)" if mode == "halving" else ""
        lines.append(f"  {mode}: {total.steps:,} optimizer steps{share}, worth {worth:.1f} trainings; evaluated "
                     f"{total.dev_examples:,} dev + {total.test_examples:,} test examples")
    lines.append(f"  halving: {layout.describe()}" + (" (not with --test-all-trials)" if test_all else ""))
    return "\n".join(lines)


def plan_costs(job: jobs.Job, stages: list[Stage], test_all: bool = False, search: halving.Halving | None = None,
               sizes: dict[str, dict[str, costs.Split]] | None = None) -> list[costs.Cost]:
    """What each stage trains and evaluates (`costs.stage_cost`), from the examples the run will load (`sizes`)."""
    tasks = tuple(stage.task for stage in stages)
    sizes = sizes or costs.split_sizes(job.run, tasks, Path(job.cache_dir))
    return [costs.stage_cost(s.index, len(s.lambdas), s.baselines, tasks, sizes, test_all, job.run.batch_size,
                             search) for s in stages]


def calibrate(job: jobs.Job, request) -> calibration.Rates:
    """`calibration.measure` as a Ray task with one worker's resources (the real model on the real device)."""
    measure = ray.remote(calibration.measure).options(num_cpus=request.cpus, num_gpus=request.gpus)
    return ray.get(measure.remote(job.run, job.cache_dir))
