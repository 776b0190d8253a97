"""`reproduce.py`: the sweep behind the paper's tables, methods × orders × seeds and the single-task runs a0, as
concurrent Ray Tune trials, then `tables.md`, `oa.csv`, `transfer.csv` and `cost.csv` (ray_jobs/README.md). An a0 is
keyed by its configuration (`continual.single_task_config`: the adapter kind, not the method)."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from collections.abc import Collection
from dataclasses import dataclass

from jumplora import continual, options, spaces, tables, tracking, uncertainty
from jumplora.config import RunConfig, setting_names
from jumplora.data import BENCHMARK_ORDERS
from jumplora.errors import JumpLoRAError
from jumplora.methods import get_method, readers, settings_fields
from jumplora.methods.registry import plan_settings
from jumplora.outputs import RESULTS
from jumplora.report.render import COST_HEADER, FWT_NOTE, TRANSFER_HEADINGS, WITHIN, cost_cells, within_text
from jumplora.report.runs import transfer_values, unlabelled_factors
from jumplora.report.summary import cost_table, metric_tables
from jumplora.results import Needs, RunResults
from jumplora.storage import RUN_DIR, SWEEP, Storage
from jumplora.tracking import folders
from ray_jobs import cli, cluster, jobs, trials

SINGLE_TASK = "single_task.json"
A0_ROW = "single-task a0 (shared)"  # the cost table's row of the a0 runs


@dataclass(frozen=True)
class Sweep:
    benchmark: str
    methods: list[str]
    orders: list[int]
    seeds: list[int]
    runs: list[jobs.Trial]  # the continual runs (`Sequence` work)
    baselines: list[jobs.Trial]  # the single-task runs (`SingleTask` work)
    trainings: int  # task trainings in all

    def identity(self) -> dict:
        """What must match for a sweep to resume another's folder (its marker's digest): its runs and a0 runs, each
        with its job's configuration; another selection would rewrite the tables over other runs."""
        return {"benchmark": self.benchmark, **{kind: {trial.id: trial.job.identity() for trial in members}
                                                for kind, members in (("runs", self.runs), ("a0", self.baselines))}}


def main(args: argparse.Namespace) -> int:
    name = args.name or f"reproduce-{args.benchmark}-{args.preset}"
    storage = Storage(args.storage_path)
    model = folders.ModelRequest.of(args)
    sweep = plan(args, storage.child(name), args.workers_per_trial, model.merged_model)
    request = cli.trial_request(args)
    if args.dry_run:
        print(describe(sweep, request, f"{storage.uri}/{name}"))
        return 0
    concurrent = args.max_concurrent or cluster.max_concurrent(request)
    cluster.check_fits(request, concurrent)  # before Ray starts (`cluster.resources`)
    storage.check_writable()
    job_folder = storage.job(name, SWEEP, cli.cache_dir(args), sweep.identity())
    tracker = tracking.from_args(args)
    with job_folder.held() as folder:
        cluster.connect()
        cluster.warn_if_storage_not_shared(storage)
        jobs.build_base(sweep.runs[0].job)  # one model and data source for every run of the sweep
        a0 = run_missing(sweep, folder, request, concurrent)
        for run in sweep.runs:
            model.record(folder.child(f"runs/{run.id}/{RUN_DIR}"))
        results = read_runs(sweep, folder)
        text = write_tables(sweep, folder, a0, results)
        folders.log_sweep(tracker, name, sweep, folder, collect(sweep, results, a0))
    print(text)
    print(f"sweep folder: {folder.uri}")
    return 0


def plan(args: argparse.Namespace, folder: Storage, workers: int, merged_model: bool = False) -> Sweep:
    """Every run and baseline of the sweep, each checked (data, λ table, steps) before anything runs; each run
    publishes its merged model if `merged_model`."""
    defined = spaces.methods_file()
    methods, orders, seeds = selection(args, defined)
    given = own_settings_given(args, methods)
    check = DataCheck(workers)
    runs, baselines = [], []
    for method, seed in itertools.product(methods, seeds):
        # a method methods.yaml does not list (a plugin's) runs with RunConfig's settings, as `jumplora run` does
        setting = {"method": method, "seed": seed, **defined["methods"].get(method, {}).get(args.benchmark, {})}
        skip = given - set(setting_names(get_method(method).settings))  # the other methods' settings
        method_runs = [continual_run(args, order, setting, folder, check, merged_model, skip) for order in orders]
        needed = {task for run in method_runs for task in check(run.job.run)}  # the tasks each run trains
        runs += method_runs
        if not get_method(method).joint:  # MTL has no FWT, so no a0
            baselines += single_task_runs(args, BENCHMARK_ORDERS[args.benchmark][0], setting, needed, check, skip)
    baselines = list({baseline.id: baseline for baseline in baselines}.values())  # one per seed, kind and task
    trainings = sum(run.work.stop for run in runs) + len(baselines)  # MTL: its one training counts as its tasks
    return Sweep(args.benchmark, methods, orders, seeds, runs, baselines, trainings)


def selection(args: argparse.Namespace, defined: dict) -> tuple[list[str], list[int], list[int]]:
    if args.benchmark not in BENCHMARK_ORDERS:
        raise JumpLoRAError(f"unknown benchmark {args.benchmark!r}: choose one of {', '.join(BENCHMARK_ORDERS)}")
    methods = args.methods or list(defined["methods"])
    for method in methods:
        get_method(method)  # registered (a plugin's too), else one line naming the methods there are
    benchmark_orders = list(BENCHMARK_ORDERS[args.benchmark])
    orders = args.orders or benchmark_orders
    if not set(orders) <= set(benchmark_orders):
        raise JumpLoRAError(f"--orders {orders}: benchmark {args.benchmark} has orders {benchmark_orders}")
    return methods, orders, args.seeds


def own_settings_given(args: argparse.Namespace, methods: list[str]) -> set[str]:
    """The methods' own settings given on the command line; each must be read by some method of the sweep (a
    method's runs take those it reads: `plan`)."""
    given = set(options.given(args)) & set(settings_fields())
    for name in sorted(given):
        who = readers(name)
        if not set(who) & set(methods):
            raise JumpLoRAError(f"--{name.replace('_', '-')} is a setting of {', '.join(who)}, which none of the "
                                f"sweep's methods ({', '.join(methods)}) reads: leave it out, or add a method that "
                                "reads it")
    return given


class DataCheck:
    """`jobs.check` once per (order, seed, task limit): the data checks do not depend on the method."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.done: dict[tuple, tuple[str, ...]] = {}

    def __call__(self, config: RunConfig) -> tuple[str, ...]:
        key = (config.order, config.seed, config.max_tasks)
        if key not in self.done:
            self.done[key] = jobs.check(config, self.workers)
        return self.done[key]


def continual_run(args: argparse.Namespace, order: int, setting: dict, folder: Storage,
                  check: DataCheck, merged_model: bool = False, skip: Collection[str] = ()) -> jobs.Trial:
    config = jobs.with_lambdas(cli.run_config(args, "reproduce", skip, order=order, lambdas=args.lambdas, **setting))
    tasks = check(config)
    run_id = f"{config.method}-order{order}-seed{config.seed}"
    return jobs.Trial(run_id, jobs.Job(config, cli.cache_dir(args)),
                      jobs.Sequence(len(tasks), publish=folder.child(f"runs/{run_id}").uri, merged_model=merged_model))


def single_task_runs(args: argparse.Namespace, order: int, setting: dict, needed: set[str],
                     check: DataCheck, skip: Collection[str] = ()) -> list[jobs.Trial]:
    """a0 of each needed task, trained as `jumplora run --order <order> --single-task-baselines` trains it: with the
    method's own adapter kind, and with plain LoRA (shared by every method); `plan` keeps one trial per id."""
    config = jobs.with_lambdas(cli.run_config(args, "reproduce", skip, order=order, lambdas=args.lambdas, **setting))
    config = dataclasses.replace(config, max_tasks=None)
    tasks = check(config)
    found = []
    for adapter in dict.fromkeys((get_method(config.method).adapter, continual.SHARED_ADAPTER)):
        a0_config = continual.single_task_config(config, adapter)
        job = jobs.Job(a0_config, cli.cache_dir(args))
        found += [jobs.Trial(a0_id(a0_config, task), job, jobs.SingleTask(j))
                  for j, task in enumerate(tasks) if task in needed]
    return found


def a0_id(config: RunConfig, task: str) -> str:
    """The id of the a0 run of `task` with the a0 configuration `config` (`continual.single_task_config`): the same for
    every method and order that share it."""
    return f"a0-{config.method}-{continual.single_task_key(config)[:8]}-seed{config.seed}-{task}"


def describe(sweep: Sweep, request: cluster.WorkerRequest, where: str) -> str:
    return "\n".join([
        f"benchmark {sweep.benchmark}: methods {', '.join(sweep.methods)}; orders {sweep.orders}; seeds {sweep.seeds}",
        *(f"  {run.id}: {describe_config(run.job.run)}" for run in sweep.runs),
        f"{len(sweep.runs)} continual runs + {len(sweep.baselines)} single-task runs = {sweep.trainings} task "
        f"trainings; per trial {request.describe()}",
        f"storage: {where}",
    ])


def describe_config(config: RunConfig) -> str:
    """A run's line of the plan: the settings its method reads (`plan_settings`: a method that refuses --threshold
    shows none), λ per task, model and caps."""
    lambdas = " ".join(f"{v:g}" for v in config.lambdas)
    settings = plan_settings(config)
    return (f"{settings + ', ' if settings else ''}λ [{lambdas}], model {config.model}, "
            f"caps {config.max_train_per_task}/{config.max_eval_per_task}")


def run_missing(sweep: Sweep, folder: Storage, request: cluster.WorkerRequest, concurrent: int) -> dict:
    """Run what the folder lacks; return the a0 runs by baseline id (recorded in single_task.json): the accuracy and
    what its training (with its evaluation) took (`jobs.A0_METRICS`)."""
    a0 = folder.read_json(SINGLE_TASK) if folder.exists(SINGLE_TASK) else {}
    missing = [run for run in sweep.runs if not folder.exists(f"runs/{run.id}/{RUN_DIR}/{RESULTS}")]
    missing += [baseline for baseline in sweep.baselines if baseline.id not in a0]
    if missing:
        print(f"{len(missing)} trainings to run, {min(concurrent, len(missing))} at a time", flush=True)
        results = trials.run_trials("sweep", missing, request, min(concurrent, len(missing)), folder)
        a0.update({trial_id: {key: result.metrics[key] for key in jobs.A0_METRICS}
                   for trial_id, result in results.items() if "a0" in result.metrics})
        folder.write_json(SINGLE_TASK, a0)
    return a0


def a0_rows(a0: dict, config: RunConfig, tasks: list[str], key: str = "a0") -> list[list | None]:
    """The a0 rows (`key` of each a0 run: its accuracy, or its flags) of a run of `config` over `tasks`: of its own
    adapter kind, then of plain LoRA (the shared one); None, None for MTL (no a0)."""
    if get_method(config.method).joint:
        return [None, None]
    return [[a0[a0_id(continual.single_task_config(config, adapter), task)].get(key) for task in tasks]
            for adapter in (None, continual.SHARED_ADAPTER)]


# what the sweep's tables read of a run besides what every results.json holds (`collect`, `collect_flags`)
TABLED = Needs("reproduce.py's tables", ("tasks", "accuracy_matrix"))


def read_runs(sweep: Sweep, folder: Storage) -> dict[str, RunResults]:
    """Each run's results.json, by run id, read once (`Storage.read_results`: the schema every reader reads with)."""
    return {run.id: folder.child(f"runs/{run.id}/{RUN_DIR}").read_results(TABLED) for run in sweep.runs}


def collect(sweep: Sweep, results_of: dict[str, RunResults], a0: dict) -> dict:
    """{(method, order, seed): {"oa", "bwt", "fwt", "fwt_last_row"}} from the runs' results.json and the a0 runs (FWT
    against the run's own kind of a0, FWT last row against the shared plain-LoRA one), on the authors' scoring of test
    rows labelled outside the options (`report.transfer_values`); MTL: BWT (null in its results.json) and FWT None."""
    return {(run.job.run.method, run.job.run.order, run.job.run.seed):
            transfer_values(results_of[run.id], *a0_rows(a0, run.job.run, results_of[run.id].tasks))
            for run in sweep.runs}


def collect_flags(sweep: Sweep, results_of: dict[str, RunResults], a0: dict) -> dict:
    """{(method, order, seed): `uncertainty.RunFlags`} of the runs on the scoring `collect` uses (the a0 rows' flags
    from the a0 runs, where all of them kept theirs); None for a run written before flags were kept."""
    flags = {}
    for run in sweep.runs:
        config, results = run.job.run, results_of[run.id]
        rows = [None if row is None or None in row else row for row in a0_rows(a0, config, results.tasks, "a0_flags")]
        flags[config.method, config.order, config.seed] = uncertainty.RunFlags.of(
            results, unlabelled_factors(results), *rows)
    return flags


def collect_costs(sweep: Sweep, results_of: dict[str, RunResults], a0: dict) -> dict:
    """The cost table (`report.cost_table`): per method, its runs' results.json cost; then the a0 runs of the sweep
    (shared by the methods) as one more row."""
    costs: dict[str, list[dict | None]] = {method: [] for method in sweep.methods}
    for run in sweep.runs:
        costs[run.job.run.method].append(results_of[run.id].cost)
    baselines = [a0[b.id] for b in sweep.baselines if b.id in a0]
    if baselines:
        costs[A0_ROW] = [{"trainings": 1, "optimizer_steps": e["steps"], "wall_seconds": e["seconds"],
                          "device_hours": e["device_hours"], "device_unit": e["device_unit"]} for e in baselines]
    return cost_table(costs)


def write_tables(sweep: Sweep, folder: Storage, a0: dict, results_of: dict[str, RunResults] | None = None) -> str:
    """tables.md, oa.csv, transfer.csv and cost.csv: `report.metric_tables` of the runs (FWT from the sweep's a0), and
    `report.cost_table` of the runs and the a0 runs; `results_of`: the runs' results (`read_runs`), else read here."""
    results_of = results_of if results_of is not None else read_runs(sweep, folder)
    summary = metric_tables(collect(sweep, results_of, a0), flags=collect_flags(sweep, results_of, a0))
    oa_columns = [str(o) for o in sweep.orders] + [sweep.benchmark]
    oa = {(m, c): summary["oa"][m][c] for m in sweep.methods for c in oa_columns}
    transfer = {(m, t): summary["transfer"][m][sweep.benchmark][t] for m in sweep.methods for t in TRANSFER_HEADINGS}
    oa_rows = [[m] + [cell(oa[m, c]) for c in oa_columns] for m in sweep.methods]
    transfer_rows = [[m] + [cell(transfer[m, t]) for t in TRANSFER_HEADINGS] for m in sweep.methods]
    folder.write_text("oa.csv", tables.csv_text(
        ["method", "column", "mean", "std", "seeds", "paper"],
        [[m, c, *csv_stats(entry), paper_text(entry)] for (m, c), entry in oa.items()]))
    folder.write_text("transfer.csv", tables.csv_text(
        ["method", "metric", "benchmark", "mean", "std", "seeds", "paper"],
        [[m, t, sweep.benchmark, *csv_stats(entry), paper_text(entry)] for (m, t), entry in transfer.items()]))
    costs = collect_costs(sweep, results_of, a0)
    cost_rows = [[m, *cost_cells(entry)] for m, entry in costs.items()]
    folder.write_text("cost.csv", tables.csv_text(
        ["method", "runs", "trainings", "optimizer_steps", "wall_hours", "device_hours", "device_unit"],
        [[m, e["recorded"], e["trainings"], e["optimizer_steps"], f"{e['wall_hours']:.6f}", f"{e['device_hours']:.6f}",
          e["device_unit"]] for m, e in costs.items()]))
    oa_header = ["method"] + [f"O{o}" for o in sweep.orders] + [sweep.benchmark.upper()]
    text = "\n".join([f"OA (%), mean ± sample std over seeds {sweep.seeds} (between-seed) {WITHIN}:",
                      tables.markdown(oa_header, oa_rows),
                      f"BWT / FWT (%), mean over orders {sweep.orders}, then mean ± std over seeds (between-seed) "
                      f"{WITHIN}:",
                      tables.markdown(["method", *TRANSFER_HEADINGS.values()], transfer_rows), FWT_NOTE,
                      "Cost: the sum over each method's runs, and over the single-task a0 runs the methods share:",
                      tables.markdown(COST_HEADER, cost_rows)])
    folder.write_text("tables.md", text)
    return text


def cell(entry: dict) -> str:
    """A cell of tables.md: mean ± sample std (the mean alone for one seed) and the within-seed interval, beside the
    paper's number."""
    text = tables.mean_std_text(entry["mean"], entry["std"]) + within_text(entry)
    return text if entry["paper"] is None else f"{text} (paper {paper_text(entry)})"  # SPEC's FWT: no paper number


def paper_text(entry: dict) -> str:
    return "–" if entry["paper"] is None else f"{entry['paper']:.2f}"


def csv_stats(entry: dict) -> list:
    """Mean, std and seeds of a CSV row; no mean (MTL's BWT / FWT) or no std (one seed): an empty field."""
    return ["" if entry[key] is None else f"{entry[key]:.4f}" for key in ("mean", "std")] + [entry["n"]]
