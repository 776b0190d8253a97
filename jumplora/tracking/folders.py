"""MLflow tracking of the Ray jobs' folders, from their driver (`ray_jobs`) or afterwards (`jumplora track`): what
the workers published to the storage folder (`jumplora.storage`) is read back and logged under deterministic keys.
Imported on its own, not by `jumplora.tracking`: the storage needs pyarrow (the ray extra)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jumplora import guidance, selection, tracking
from jumplora.data import order_tasks
from jumplora.errors import JumpLoRAError
from jumplora.outputs import RESULTS
from jumplora.record import TaskRecord
from jumplora.results import StageRecord, read_manifest
from jumplora.storage import JOB_FILE, MANIFEST, RUN_DIR, SELECT, Storage
from jumplora.tracking import models
from jumplora.tracking.runs import LOGGED, percent

# a λ trial's metrics (`grid.candidate`): its accuracies (logged in percent, as every accuracy: `runs.percent`) and
# its counts; None ones (a trial a search cut has no end-of-task dev mean) are not logged
TRIAL_ACCURACIES = ("dev_mean", "dev_past", "dev_current", "test_mean", "rung_dev_mean", "rung_dev_past",
                    "rung_dev_current")
TRIAL_COUNTS = ("steps", "cut_at_step")
GRID_TABLES = ("grid_trials.csv", "grid_report.md", MANIFEST)  # logged beside the grid's run
SWEEP_TABLES = ("tables.md", "oa.csv", "transfer.csv", "single_task.json")


@dataclass(frozen=True)
class ModelRequest:
    """`--save-merged-model` / `--register-model NAME` of a grid or sweep: publish the merged model (a registration
    implies it), and the registration asked for, recorded beside it (`tracking.models.REGISTRATION_FILE`) for whoever
    logs the run directory: the driver, or `jumplora track` afterwards."""

    merged_model: bool = False
    register: str | None = None

    @classmethod
    def of(cls, args) -> ModelRequest:
        return cls(bool(args.save_merged_model or args.register_model), args.register_model)

    def record(self, run_folder: Storage) -> None:
        if self.register:
            run_folder.write_text(models.REGISTRATION_FILE, models.registration_text(self.register))


NO_MODEL = ModelRequest()


@contextlib.contextmanager
def local_copy(folder: Storage) -> Iterator[Path]:
    """`folder` as a local directory: itself on a local disk, else a temporary download."""
    if folder.is_local:
        yield Path(folder.path)
        return
    import pyarrow.fs

    with tempfile.TemporaryDirectory() as scratch:
        pyarrow.fs.copy_files(folder.path, scratch, source_filesystem=folder.fs)
        yield Path(scratch)


def log_run_folder(tracker_: tracking.Tracker, folder: Storage, name: str, key: str,
                   parent: tracking.Run | None = None, fwt: float | None = None,
                   fwt_last_row: float | None = None) -> None:
    """A published run directory (`folder`), logged as it is (`Storage.publish_run` wrote all of it)."""
    if tracker_:
        results = folder.read_results(LOGGED)
        with local_copy(folder) as directory:
            tracking.log_completed_run(tracker_, results, directory, name, key, parent=parent, fwt=fwt,
                                       fwt_last_row=fwt_last_row)


def sequence_key(folder: Storage) -> str:
    return tracking.key_of("train_sequence", folder.uri)


def log_sequence(tracker_: tracking.Tracker, folder: Storage, name: str) -> None:
    """`train_sequence.py`: the run published under `folder/run`."""
    log_run_folder(tracker_, folder.child(RUN_DIR), name, sequence_key(folder))


class GridLog:
    """`grid_lambda.py`: `stage(record)` after each stage of the manifest, `end(records)` after `finish`."""

    def __init__(self, tracker_: tracking.Tracker, name: str, folder: Storage, run_config: dict,
                 tasks: list[str], grid: list[list[float]], rule: str = selection.BEST) -> None:
        self.tracker, self.folder, self.tasks = tracker_, folder, tasks
        self.key = tracking.key_of("grid", folder.uri)
        self.log = tracking.ContinualLogger(tracker_, name, self.key, kind="grid")
        run = self.log.begin(run_config, tasks)
        if run is not None and not run.finished:
            tracker_.log(run, params={"grid.lambdas_tried": grid, "grid.select": rule})

    def stage(self, record: StageRecord) -> None:
        parent = self.log.run
        if parent is None or parent.finished:
            return
        t, task_name = record.task - 1, tracking.task_run_name(record.task - 1, record.task_name)
        task_run = self.tracker.start(parent.experiment, task_name, tracking.key_of(self.key, "task", t), "task",
                                      parent=parent)
        if task_run is None or task_run.finished or "chosen_lambda" in task_run.metrics:
            return  # this stage is logged already
        for trial in record.trials:
            child = self.tracker.start(parent.experiment, f"{task_name}-lam{trial.lam:g}",
                                       tracking.key_of(self.key, "trial", t, trial.lam), "trial",
                                       parent=task_run, tags={"selected": str(trial.selected).lower()})
            if child is not None and not child.finished:
                self.tracker.log(child, params={"task": record.task_name, "task_index": t + 1,
                                                "lambda": trial.lam},
                                 metrics={key: percent(getattr(trial, key)) for key in TRIAL_ACCURACIES} |
                                 {key: getattr(trial, key) for key in TRIAL_COUNTS} |
                                 {"selected": float(trial.selected)},
                                 curves={"rung_dev": [percent(v) for v in trial.rung_dev]} if trial.rung_dev else None)
                self.tracker.finish(child)
        work = record.work or {}
        self.tracker.log(task_run, metrics={"chosen_lambda": record.selected_lam,
                                            **{f"stage_{key}": value for key, value in work.items()}})
        if guidance.lambda_plotted(record):
            with tempfile.TemporaryDirectory() as scratch:
                path = Path(scratch) / guidance.lambda_plot_name(record)
                guidance.lambda_plot(record, path)
                self.tracker.artifacts(task_run, [path])
        self.tracker.log(parent, steps={"chosen_lambda": (t, record.selected_lam)},
                         metrics={f"a0/{b['task']:02d}": percent(b["a0"]) for b in record.baselines})

    def end(self, records: list[StageRecord]) -> None:
        if self.log.run is None or self.log.run.finished:
            return
        from jumplora import plots

        for record in records:  # idempotent: stages logged before a restart are left as they are
            self.stage(record)
        results = self.folder.child(RUN_DIR).read_results(LOGGED)
        with local_copy(self.folder.child(RUN_DIR)) as run_dir, tempfile.TemporaryDirectory() as scratch:
            extra = [Path(scratch) / plots.GRID_LAMBDAS, *copied(self.folder, GRID_TABLES, scratch)]
            plots.grid_lambdas(records, extra[0])
            for t in range(len(results.tasks)):
                self.log.on_task(t, TaskRecord.from_results(results, t))
            total = guidance.search_cost(records)  # what the whole grid cost, every trial
            self.tracker.log(self.log.run, metrics={
                "search/trainings": total["trainings"], "search/optimizer_steps": total["optimizer_steps"],
                "search/wall_hours": total["seconds"] / 3600, "search/device_hours": total["device_hours"]})
            self.log.end(results, run_dir, extra)


def log_sweep(tracker_: tracking.Tracker, name: str, sweep, folder: Storage, values: dict) -> None:
    """`reproduce.py`: per order a parent run `name` (reopened when a resubmitted sweep adds runs), a child per
    continual run (every method of the sweep) with its FWT (and FWT last row) from the sweep's a0 (None for MTL), the
    tables and the order's BWT radar of the runs that have a BWT (not MTL)."""
    if not tracker_:
        return
    from jumplora import plots

    for order in sweep.orders:
        parent = tracker_.start(tracking.experiment_name(order), name, tracking.key_of("sweep", folder.uri, order),
                                "sweep", reopen=True)
        if parent is None:
            return
        tracker_.log(parent, params={"benchmark": sweep.benchmark, "methods": sweep.methods, "seeds": sweep.seeds,
                                     "order": order})
        traces = []
        for run in sweep.runs:
            config = run.job.run
            if config.order != order:
                continue
            run_folder = folder.child(f"runs/{run.id}/{RUN_DIR}")
            value = values[config.method, order, config.seed]
            log_run_folder(tracker_, run_folder, run.id, tracking.key_of("sweep-run", folder.uri, run.id),
                           parent=parent, fwt=value["fwt"], fwt_last_row=value.get("fwt_last_row"))
            traces.append((run.id, run_folder.read_results()))
        with tempfile.TemporaryDirectory() as scratch:
            radar = Path(scratch) / f"bwt_radar_order{order}.png"
            if traces:  # bwt_radar leaves out MTL (no BWT); with only MTL runs it writes no file
                plots.bwt_radar(traces, radar)
            tracker_.artifacts(parent, [p for p in (radar, *copied(folder, SWEEP_TABLES, scratch)) if p.exists()])
        tracker_.finish(parent)


def copied(folder: Storage, names: tuple[str, ...], scratch: str) -> list[Path]:
    """Those of the files `names` that `folder` holds, copied into the local folder `scratch`."""
    texts = {name: folder.read_text(name) for name in names}  # None: not there
    for name, text in texts.items():
        if text is not None:
            (Path(scratch) / name).write_text(text)
    return [Path(scratch) / name for name, text in texts.items() if text is not None]


def check(location: str) -> None:
    """What `catch_up` reads of the folder at `location`, read as data first (its manifest, its published run's
    results.json, each as `jumplora report` reads it, with what logging it needs), so that `jumplora track` refuses a
    damaged folder before it logs anything."""
    folder = Storage(location)
    if folder.exists(MANIFEST):
        read_manifest(folder.read_json(MANIFEST), f"{folder.uri}/{MANIFEST}")
    if folder.exists(f"{RUN_DIR}/{RESULTS}"):
        folder.child(RUN_DIR).read_results(LOGGED)


def catch_up(tracker_: tracking.Tracker, location: str) -> str:
    """Log the grid or train_sequence.py folder at `location` (a path or a URI) as its driver would have: a finished
    one whole; of an unfinished one whose driver is gone, the grid's finished stages, and its runs left RUNNING are
    marked KILLED; one whose driver runs is left to it. One line says what was done."""
    folder = Storage(location)
    parent, name = folder.uri.rsplit("/", 1)
    kind = "grid" if folder.exists(MANIFEST) else "sequence" if folder.exists(JOB_FILE) else None
    if kind is None:
        raise JumpLoRAError(f"{location} is neither a run directory, a grid_lambda.py folder (with {MANIFEST}) nor a "
                            f"train_sequence.py folder (with {JOB_FILE})")
    holder = Storage(parent).holder(name)
    if holder is not None:
        return f"{folder.uri}: its driver runs ({holder.describe()}) and logs it itself"
    finished, before = folder.exists(f"{RUN_DIR}/{RESULTS}"), tracker_.changes
    if kind == "sequence":
        if finished:
            log_sequence(tracker_, folder, name)
        key = sequence_key(folder)
    else:
        job, stages = read_manifest(folder.read_json(MANIFEST), f"{folder.uri}/{MANIFEST}")
        config = job["run"]
        tasks = order_tasks(config["data_dir"], config["order"])[: config["max_tasks"] or None]
        log = GridLog(tracker_, name, folder, config, list(tasks), job["lambdas_tried"],
                      job.get(SELECT, selection.BEST))
        if finished:
            log.end(stages)
        else:
            for record in stages:
                log.stage(record)
        key = log.key
    if finished:
        return f"{folder.uri}: {tracking.logged_since(tracker_, before)}"
    closed = tracker_.close_running(tracking.KEY_TAG, key, "KILLED")
    return (f"{folder.uri}: not finished and its driver is gone: what it finished is logged, {len(closed)} run(s) "
            "left RUNNING marked KILLED; submit the same job again to resume it")
