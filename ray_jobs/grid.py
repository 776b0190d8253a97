"""`grid_lambda.py --order N`: the per-task λ grid of SPEC §5 on Ray Tune.

Stage 1 trains task 1 (λ = 0) and, beside it, the single-task baselines a0 of tasks 2..T (for FWT; a0 of task 1 is
task 1's own first training, the same computation). Stage t ≥ 2 is one Tune experiment with a trial per λ of the
grid; every trial starts from the checkpoint (model and W_past) selected at stage t−1, trains task t and reports the
mean dev accuracy over tasks 1..t: a trial evaluates the dev sets only, since selection reads nothing else. The best
trial (ties: the smaller λ) is then evaluated once on the test sets of tasks 1..t (its row of the accuracy matrix)
and is the start of stage t+1 (`--test-all-trials` evaluates every trial's test sets instead, for the trial table).
After each stage the choice is appended to `<storage>/<name>/manifest.json`, so a resubmitted job skips finished
stages; a trial that finished is recorded at once (see `trials`), so a resubmitted job reruns only the unfinished
trials of an interrupted stage. At the end: the run directory of the last selected checkpoint (`run/`),
`grid_trials.csv` and `grid_report.md`."""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import ray
import ray.train

from jumplora import calibration, spaces, tables
from jumplora.config import RunConfig, check_no_empty_field
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS, get_method
from jumplora.outputs import format_summary
from ray_jobs import cli, cluster, costs, jobs, track, trials, worker
from ray_jobs.storage import Storage

MANIFEST = track.MANIFEST
CHOSEN = "chosen"  # <stage>/chosen: the chosen trial's checkpoint with its test row, the start of the next stage
TIE_TOLERANCE = 1e-12  # dev means closer than this are a tie (the same counts summed in another order)


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

    def trials(self, job: jobs.Job, test: bool = False) -> list[jobs.Trial]:
        """One trial per λ (task `index` trained with it, from the stage's start; test sets evaluated only if `test`),
        then the single-task baselines."""
        found = [jobs.Trial(f"{self.name}-lam{lam:g}", job.with_lambda(self.index, lam),
                            jobs.Sequence(self.index + 1, test=test)) for lam in self.lambdas]
        return found + [jobs.Trial(f"a0-task{j + 1:02d}", job, jobs.SingleTask(j)) for j in self.baselines]


def plan(tasks: tuple[str, ...], grid: list[float]) -> list[Stage]:
    first = Stage(0, tasks[0], (0.0,), tuple(range(1, len(tasks))))
    return [first] + [Stage(t, tasks[t], tuple(grid)) for t in range(1, len(tasks))]


def parse_grid(text: str | None) -> list[float]:
    if text is None:
        return spaces.lambda_grid()
    check_no_empty_field(text, "--grid")
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise JumpLoRAError(f"--grid must be numbers like 1,1e3,1e5; got {text!r}") from None
    cli.refuse_repeats(values, "--grid", "λ")
    return spaces.positive_numbers(values, "--grid λ values")


def select(records: list[dict]) -> dict:
    """The trial with the highest mean dev accuracy over the seen tasks; ties go to the smaller λ."""
    best = max(record["dev_mean"] for record in records)
    return min((r for r in records if r["dev_mean"] >= best - TIE_TOLERANCE), key=lambda r: r["lam"])


class Manifest:
    """`manifest.json`: the grid's identity and one record per finished stage (trials, choice, checkpoint)."""

    def __init__(self, folder: Storage, identity: dict) -> None:
        self.folder = folder
        self.data = folder.read_json(MANIFEST) if folder.exists(MANIFEST) else {"job": identity, "stages": []}
        if self.data["job"] != identity:
            raise JumpLoRAError(f"{folder.uri} holds a grid of another configuration: pass another --name")

    @property
    def stages(self) -> list[dict]:
        return self.data["stages"]

    def add(self, record: dict) -> None:
        self.stages.append(record)
        self.folder.write_json(MANIFEST, self.data)


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineErrorParser(prog="grid_lambda.py", description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=int, required=True, help="task order")
    cli.add_method_options(parser)
    cli.add_run_options(parser)
    parser.add_argument("--grid", default=None,
                        help="λ values, e.g. 1,1e3,1e5 (default: search_spaces/lambda_grid.yaml)")
    parser.add_argument("--test-all-trials", action="store_true",
                        help="evaluate the test sets in every trial, not only the chosen one's (the trial table "
                             "then shows every trial's test accuracy; about a third more evaluation)")
    cli.add_trial_options(parser, "grid name (default: grid-order<N>-<method>-<threshold>-<delta>-<preset>-seed<S>)")
    parser.add_argument("--calibrate", action="store_true",
                        help="print the plan with an estimated time: a few training steps and an evaluation batch of "
                             "the model, timed on one trial's resources; trains nothing else")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config, job, stages = checked_grid(args)
    name = args.name or (f"grid-order{config.order}-{config.method}-{config.threshold}-{config.ella_delta}-"
                         f"{args.preset}-seed{config.seed}")
    storage = Storage(args.storage_path)
    if args.dry_run and not args.calibrate:
        print(describe_plan(job, args.preset, stages, cli.trial_request(args), args.max_concurrent,
                            storage.child(name).uri, args.test_all_trials))
        return 0
    if args.calibrate:
        request, concurrent = connect(args, job, stages)
        print(describe_plan(job, args.preset, stages, request, concurrent, storage.child(name).uri,
                            args.test_all_trials, calibrate(job, request)))
        return 0
    storage.check_writable()
    tracker = track.tracker(args)
    with storage.lock(name, "grid_lambda.py"):
        request, concurrent = connect(args, job, stages)
        cluster.warn_if_storage_not_shared(storage)
        log = track.GridLog(tracker, name, storage.child(name), job.identity()["run"], [s.task for s in stages],
                            [list(s.lambdas) for s in stages]) if tracker else None
        run_grid(storage.child(name), job, stages, request, concurrent, log, args.test_all_trials)
    return 0


def connect(args: argparse.Namespace, job: jobs.Job, stages: list[Stage]) -> tuple[cluster.WorkerRequest, int]:
    """Ray: one trial's resources and how many trials run at once, checked against the cluster; the base built."""
    request = cli.trial_request(args)
    cluster.connect()
    concurrent = args.max_concurrent or min(widest_stage(stages), cluster.max_concurrent(request))
    cluster.check_fits(request, concurrent)
    jobs.build_base(job)
    return request, concurrent


def widest_stage(stages: list[Stage]) -> int:
    """The most trials of a stage: more at once would never run."""
    return max(len(stage.lambdas) + len(stage.baselines) for stage in stages)


def checked_grid(args: argparse.Namespace) -> tuple[RunConfig, jobs.Job, list[Stage]]:
    """The configuration, the job and the stages, all checked before Ray is touched."""
    config = cli.run_config(args, args.order, **cli.method_fields(args))
    if not get_method(config.method).per_task_lambda:
        with_lambda = ", ".join(name for name, spec in METHODS.items() if spec.per_task_lambda)
        raise JumpLoRAError(f"the λ grid needs a method with a per-task λ ({with_lambda}), got {config.method}")
    config = jobs.set_lambdas(config, [0.0] * jobs.order_length(config))  # each stage sets the λ it tries
    grid = parse_grid(args.grid)
    tasks = jobs.check(config, args.workers_per_trial)
    return config, jobs.Job(config, cli.cache_dir(args)), plan(tasks, grid)


def run_grid(folder: Storage, job: jobs.Job, stages: list[Stage], request, concurrent: int,
             log: track.GridLog | None = None, test_all: bool = False) -> None:
    manifest = Manifest(folder, {**job.identity(), "lambdas_tried": [list(stage.lambdas) for stage in stages]})
    for stage in stages[len(manifest.stages):]:
        manifest.add(run_stage(stage, job, manifest.stages, request, concurrent, folder, test_all))
        if log is not None:
            log.stage(manifest.stages[-1])
    results = finish(folder, job, manifest.stages, request)
    if log is not None:
        log.end(manifest.stages)
    print(report_text(manifest.stages, results))
    print(f"grid folder: {folder.uri}")


def stage_job(job: jobs.Job, records: list[dict]) -> jobs.Job:
    """The job as seen by a stage: λ of the finished tasks as chosen, the others 0 (a trial sets its own)."""
    lambdas = [record["selected_lam"] for record in records]
    return job.with_lambdas(lambdas + [0.0] * (len(job.run.lambdas) - len(lambdas)))


def checkpoint(path: str | None, folder: Storage):
    return ray.train.Checkpoint(path, filesystem=folder.fs) if path else None


def run_stage(stage: Stage, job: jobs.Job, records: list[dict], request, concurrent: int, folder: Storage,
              test_all: bool = False) -> dict:
    started = time.monotonic()
    start = checkpoint(records[-1]["checkpoint"], folder) if records else None
    stage_trials = stage.trials(stage_job(job, records), test=test_all)
    at_once = min(concurrent, len(stage_trials))
    print(f"stage {stage.index + 1} ({stage.task}): {len(stage_trials)} trainings, {at_once} at a time", flush=True)
    results = trials.run_trials(stage.name, stage_trials, request, at_once, folder, start=start)
    lambda_trials = [trial for trial in stage_trials if isinstance(trial.work, jobs.Sequence)]
    candidates = [{"lam": trial.job.run.lambdas[stage.index], "dev_mean": results[trial.id].metrics["dev_mean"],
                   "test_mean": results[trial.id].metrics.get("test_mean"), "checkpoint": results[trial.id].checkpoint}
                  for trial in lambda_trials]
    chosen = select(candidates)
    for candidate in candidates:
        candidate["selected"] = candidate is chosen
    start_of_next = chosen["checkpoint"]
    if not test_all:  # the chosen trial's row of the test accuracy matrix, evaluated once
        test_row = ray.remote(worker.with_test_row).options(num_cpus=request.cpus, num_gpus=request.gpus)
        trial = lambda_trials[candidates.index(chosen)]
        start_of_next, row = ray.get(test_row.remote(trial.job, checkpoint(chosen["checkpoint"], folder),
                                                     folder.child(stage.name).uri, CHOSEN))
        chosen["test_mean"] = math.fsum(row) / len(row)
    baselines = [{"task": trial.work.task + 1, "a0": results[trial.id].metrics["a0"]}
                 for trial in stage_trials if isinstance(trial.work, jobs.SingleTask)]
    seconds = time.monotonic() - started
    print(f"stage {stage.index + 1} ({stage.task}): λ = {chosen['lam']:g} chosen, mean dev accuracy "
          f"{100 * chosen['dev_mean']:.2f} %; {len(stage_trials)} trainings in {seconds:.0f} s", flush=True)
    return {"task": stage.index + 1, "task_name": stage.task, "selected_lam": chosen["lam"],
            "checkpoint": start_of_next, "trials": sorted(candidates, key=lambda c: c["lam"]),
            "baselines": sorted(baselines, key=lambda b: b["task"]), "seconds": seconds}


def finish(folder: Storage, job: jobs.Job, records: list[dict], request) -> dict:
    """Publish the run directory of the last selected checkpoint (with a0 → FWT) and the trial tables."""
    a0 = [records[0]["trials"][0]["test_mean"]] + [b["a0"] for b in records[0]["baselines"]]
    publish = ray.remote(worker.publish_checkpoint).options(num_cpus=request.cpus, num_gpus=request.gpus)
    results = ray.get(publish.remote(stage_job(job, records), checkpoint(records[-1]["checkpoint"], folder), a0,
                                     folder.uri))
    header, rows = trial_table(records)
    folder.write_text("grid_trials.csv", tables.csv_text(header, rows))
    folder.write_text("grid_report.md", report_text(records, results, markdown=True))
    return results


def trial_table(records: list[dict]) -> tuple[list[str], list[list]]:
    header = ["task", "task_name", "lambda", "dev_accuracy_seen_pct", "test_accuracy_seen_pct", "selected"]
    rows = [[r["task"], r["task_name"], f"{c['lam']:g}", f"{100 * c['dev_mean']:.2f}",
             "" if c["test_mean"] is None else f"{100 * c['test_mean']:.2f}", "yes" if c["selected"] else ""]
            for r in records for c in r["trials"]]
    return header, rows


def report_text(records: list[dict], results: dict, markdown: bool = False) -> str:
    chosen = tables.markdown(["task", "name", "λ chosen", "mean dev accuracy over tasks 1..t (%)"],
                             [[r["task"], r["task_name"], f"{r['selected_lam']:g}",
                               f"{100 * next(c for c in r['trials'] if c['selected'])['dev_mean']:.2f}"]
                              for r in records])
    parts = ["λ chosen per task:", chosen, format_summary(results)]
    if markdown:
        parts += ["every trial:", tables.markdown(*trial_table(records))]
    return "\n".join(parts)


def describe_plan(job: jobs.Job, preset: str, stages: list[Stage], request, concurrent: int | None, where: str,
                  test_all: bool = False, rates: calibration.Rates | None = None) -> str:
    """The stages, what each costs (`costs`), the resources and, when calibrated, the estimated time."""
    config = job.run
    lines = [f"λ grid of order {config.order} ({', '.join(s.task for s in stages)}): {config.method}, threshold "
             f"{config.threshold}, ELLA delta {config.ella_delta}, seed {config.seed}, preset {preset} "
             f"(model {config.model}); data: {config.data_dir or 'the synthetic benchmark'}"]
    for stage in stages:
        what = f"λ ∈ {{{', '.join(f'{lam:g}' for lam in stage.lambdas)}}}"
        if stage.baselines:
            what += f", and single-task baselines of tasks {stage.baselines[0] + 1}..{stage.baselines[-1] + 1}"
        start = "the base model" if stage.index == 0 else f"the model chosen at stage {stage.index}"
        lines.append(f"stage {stage.index + 1}: task {stage.index + 1} {stage.task}: {what}; from {start}")
    stage_costs = plan_costs(job, stages, test_all)
    lines.append(costs.table([(str(s.index + 1), s.task) for s in stages], stage_costs))
    total = sum(stage_costs, costs.Cost())
    device = "GPU" if request.gpus else "CPU"
    lines.append(f"{total.trainings} trainings of one task each; per trial {request.describe()} (training on "
                 f"{device}); {concurrent or 'as many as the cluster holds'} at once")
    starts = [costs.process_starts(cost.trainings, request.workers, concurrent or cost.trainings, not test_all)
              for cost in stage_costs]
    lines.append(f"worker processes started (each pays the device's cold start once; on a CPU Ray may reuse a "
                 f"task's): {sum(starts) + 1} (per stage {', '.join(map(str, starts))}; 1 to publish)")
    if rates is not None:
        lines.append(costs.estimate(total, rates, concurrent or 1, request.total_gpus, sum(starts) + 1))
    lines.append(f"storage: {where}")
    return "\n".join(lines)


def plan_costs(job: jobs.Job, stages: list[Stage], test_all: bool = False) -> list[costs.Cost]:
    """What each stage trains and evaluates (`costs.stage_cost`), from the examples the run will load."""
    tasks = tuple(stage.task for stage in stages)
    sizes = costs.split_sizes(job.run, tasks, Path(job.cache_dir))
    return [costs.stage_cost(s.index, len(s.lambdas), s.baselines, tasks, sizes, test_all) for s in stages]


def calibrate(job: jobs.Job, request) -> calibration.Rates:
    """`calibration.measure` as a Ray task with one worker's resources (the real model on the real device)."""
    measure = ray.remote(calibration.measure).options(num_cpus=request.cpus, num_gpus=request.gpus)
    return ray.get(measure.remote(job.run, job.cache_dir))
