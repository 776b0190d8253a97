"""What is logged to MLflow: the runs' keys, names and version tags, a continual run's params, one child run per task
(from its `TaskRecord`), the final metrics and the run directory's files as artifacts."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora import cost, flags, uncertainty
from jumplora.results import Needs, RunResults, read_results
from jumplora.tracking import models
from jumplora.tracking.client import Run, Tracker, key_of, metric_name
from jumplora.tracking.store import experiment_name

if TYPE_CHECKING:
    from jumplora.record import TaskRecord

RUN_DIR_TAG = "jumplora.run_dir"
# what logging a finished run from its results.json reads (`log_completed_run`: its params, a child run per training,
# its merged model's tags), which a file written before one was recorded lacks
LOGGED = Needs("logging it to MLflow as its run logs itself", ("tasks", "config", "accuracy_matrix",
               "dev_accuracy_matrix", "lambdas", "loss_curves", "thresholds", "sparsity"),
               ("order", "method", "seed", "data_dir"))


def flat_params(data: dict, prefix: str = "") -> dict[str, str]:
    """Every value as one param: nested dicts as `a.b`, lists as JSON, None as `None`. A character MLflow refuses in
    a key is written `_` (a method's settings sit under its name: `config.jumplora_ella.ella_delta`)."""
    out: dict[str, str] = {}
    for name, value in data.items():
        key = f"{prefix}{metric_name(str(name))}"
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{key}."))
        elif isinstance(value, list | tuple | dict):
            out[key] = json.dumps(list(value) if isinstance(value, tuple) else value)
        else:
            out[key] = str(value)
    return out


def task_run_name(t: int, task: str) -> str:
    return f"task{t + 1:02d}-{task}"


def percent(accuracy: float | None) -> float | None:
    """An accuracy (a fraction, as results.json keeps it) as MLflow gets every one: in percent (DECISIONS, "Every
    accuracy in MLflow is in percent"). None stays None."""
    return None if accuracy is None else 100 * accuracy


def log_task(tracker: Tracker, parent: Run, key: str, tasks: Sequence[str], t: int,
             record: TaskRecord) -> Run | None:
    """Task t's child run: CE and λ·P curves, τ per group, sparsity overall and per block, the accuracy rows in
    percent (`percent`; `tasks`: the order's task names); plus the rows as step metrics of the parent (step = t), so
    the parent's charts show every task's accuracy over the run."""
    child = tracker.start(parent.experiment, task_run_name(t, record.task), key_of(key, "task", t), "task",
                          parent=parent)
    if child is None or child.finished:
        return child
    lam = float(record.lam)
    seen = tasks[: len(record.test)]  # the order's first t + 1 tasks (MTL's one training: all of them)
    names = [f"{j + 1:02d}-{task}" for j, task in enumerate(seen)]
    test = {name: percent(value) for name, value in zip(names, record.test, strict=True)}
    dev = {name: percent(value) for name, value in zip(names, record.dev, strict=True)}
    metrics = {f"tau/{group}": value for group, value in record.thresholds.items()}
    metrics["sparsity/overall"] = record.sparsity["overall"]
    metrics.update({f"sparsity/{block}": value for block, value in record.sparsity["per_layer"].items()})
    for split, values, cells in (("test", test, record.test_flags), ("dev", dev, record.dev_flags)):
        metrics.update({f"{split}_accuracy/{name}": value for name, value in values.items()})
        for name, cell in zip(values, cells, strict=False):  # none for a record without flags: its Wilson bounds
            interval = uncertainty.cell_interval(flags.unpack(cell))
            metrics.update({f"{split}_accuracy_low/{name}": percent(interval.low),
                            f"{split}_accuracy_high/{name}": percent(interval.high)})
    metrics.update({"seen_test_mean": sum(test.values()) / len(test), "seen_dev_mean": sum(dev.values()) / len(dev),
                    "lambda": lam, "seconds": record.seconds, "optimizer_steps": record.steps})
    tracker.log(child, params={"task": record.task, "task_index": t + 1, "lambda": lam},
                metrics=metrics, curves={"ce": record.ce, "lambda_penalty": record.penalty})
    # the parent's step values before the child is finished: a child found unfinished is logged again, and its
    # step values are then logged only if they are not there yet (a process may have stopped in between)
    if child.new or t not in tracker.steps(parent, "seen_test_mean"):
        steps = {f"test_accuracy/{name}": (t, value) for name, value in test.items()}
        steps.update({"seen_test_mean": (t, metrics["seen_test_mean"]),
                      "seen_dev_mean": (t, metrics["seen_dev_mean"]), "lambda": (t, lam),
                      "sparsity": (t, record.sparsity["overall"])})
        tracker.log(parent, steps=steps)
    tracker.finish(child)
    return child


# results.json → MLflow
METRIC_KEYS = {"oa": "OA", "la": "LA", "bwt": "BWT", "fwt": "FWT", "fwt_last_row": "FWT_last_row"}
# the final metrics are logged rounded, as MLflow's runs table shows a whole float (DECISIONS "The MLflow view rounds
# what it shows"): points and percent to 2 decimals, hours to 4; their whole values stay in results.json
POINT_DIGITS, HOUR_DIGITS = 2, 4
HOURS = ("cost/wall_hours", "cost/device_hours")


def final_metrics(results: RunResults, fwt: float | None = None,
                  fwt_last_row: float | None = None) -> dict[str, float | None]:
    """OA, LA (the learning accuracy, the diagonal's mean: computed from the matrix for a run written before it was
    recorded), BWT, FWT, FWT last row (the authors' script's FWT, SPEC §4; `fwt` / `fwt_last_row` in place of the
    run's: a sweep's, from its a0 runs), each with its 95 % interval's bounds where the run has one (`<key>_low`,
    `<key>_high`: `uncertainty`), and what the run cost (`jumplora.cost`); rounded as the view shows them
    (`POINT_DIGITS`, `HOUR_DIGITS`)."""
    metrics = {key: results.learning_accuracy() if name == "la" else getattr(results, name)
               for name, key in METRIC_KEYS.items()}
    metrics.update({key: value for key, value in (("FWT", fwt), ("FWT_last_row", fwt_last_row)) if value is not None})
    intervals = uncertainty.intervals_of(results)
    for name, interval in ({} if intervals is None else intervals.metrics).items():
        metrics.update({f"{METRIC_KEYS[name]}_low": interval.low, f"{METRIC_KEYS[name]}_high": interval.high})
    metrics.update(cost.metrics(results.cost))
    return {key: None if value is None else round(value, HOUR_DIGITS if key in HOURS else POINT_DIGITS)
            for key, value in metrics.items()}


def run_dir_artifacts(run_dir: Path) -> list[Path]:
    """What a run directory holds of artifacts: results, CSV, summary, updates, plots (a merged model is a LoggedModel
    of its own: `tracking.models`)."""
    from jumplora.outputs import ACCURACY_CSV, RESULTS, SUMMARY, UPDATES

    files = [run_dir / name for name in (RESULTS, ACCURACY_CSV, SUMMARY, UPDATES)]
    files += sorted(run_dir.glob("*.png"))
    return [p for p in files if p.exists()]


class ContinualLogger:
    """Live logging of one continual run: `begin` → `on_task` after each task → `end` (or `fail`)."""

    def __init__(self, tracker: Tracker, name: str, key: str, parent: Run | None = None, kind: str = "run") -> None:
        self.tracker, self.name, self.key, self.parent, self.kind = tracker, name, key, parent, kind
        self.run: Run | None = None
        self.tasks: list[str] = []

    def begin(self, config: dict, tasks: list[str], fingerprint: str | None = None, replace: bool = False,
              tags: dict | None = None) -> Run | None:
        self.tasks = list(tasks)
        self.run = self.tracker.start(experiment_name(config["order"]), self.name, self.key, self.kind,
                                      parent=self.parent, tags=tags, replace=replace)
        if self.run is not None and not self.run.finished:
            params = {**flat_params(config, "config."), "tasks": json.dumps(tasks)}
            self.tracker.log(self.run, params=params | ({"data_fingerprint": fingerprint} if fingerprint else {}))
        return self.run

    def on_task(self, t: int, record: TaskRecord) -> None:
        """Task t of the order given to `begin` is done: its record is logged (a child run)."""
        if self.run is not None and not self.run.finished:
            log_task(self.tracker, self.run, self.key, self.tasks, t, record)

    def end(self, results: RunResults, run_dir: Path | None, extra_artifacts: Iterable[Path] = (),
            fwt: float | None = None, fwt_last_row: float | None = None) -> None:
        if self.run is None or self.run.finished:
            return
        metrics = final_metrics(results, fwt, fwt_last_row)
        metrics.update({f"lambda/{t + 1:02d}-{task}": lam
                        for t, (task, lam) in enumerate(zip(results.tasks, results.lambdas, strict=True))})
        runtime = results.runtime  # None for runs written before it was recorded
        params = flat_params(runtime, "runtime.") if runtime else {}
        if results.unlabelled_test:  # how test rows labelled outside the options were scored (SPEC §4)
            params["unlabelled_test.scoring"] = results.unlabelled_test["scoring"]
        self.tracker.log(self.run, params=params, metrics=metrics)
        paths = run_dir_artifacts(run_dir) if run_dir is not None else []
        self.tracker.artifacts(self.run, [*paths, *extra_artifacts])
        if run_dir is not None:  # before the run is finished: a store that fails leaves it RUNNING, and `jumplora
            # track` logs the model
            models.log_merged_model(self.tracker, self.run, run_dir / models.MERGED_MODEL_DIR, results, self.key,
                                    metrics, models.requested_registration(run_dir))
        self.tracker.finish(self.run)

    def fail(self, status: str = "FAILED") -> None:
        if self.run is not None and not self.run.finished:
            self.tracker.finish(self.run, status)


def run_key(run_dir: Path, config: dict) -> str:
    """The `jumplora.key` of a `jumplora run` directory: its absolute path and its configuration (`RunConfig.to_dict`,
    the device aside), the same whether the run logs itself or `jumplora track` logs it afterwards."""
    from jumplora.config import digest_of

    return key_of("jumplora run", str(Path(run_dir).resolve()), digest_of(config, exclude=("device",)))


def run_dir_tag(run_dir: Path) -> dict[str, str]:
    """The tag naming the run directory of a parent run (a hash of its absolute path), by which `jumplora track`
    finds the runs of a directory whose process died before it finished."""
    return {RUN_DIR_TAG: key_of("run directory", str(Path(run_dir).resolve()))}


def logged_config(config: dict, lambdas: list[float]) -> dict:
    """The config a parent run's params hold (`RunConfig.to_dict`): λ as the run resolved it (`paper` becomes the
    numbers)."""
    return {**config, "lambdas": lambdas}


def log_run_directory(tracker: Tracker, run_dir: Path) -> Run | None:
    """A finished `jumplora run` directory, logged as the run itself logs (same key, params, children, metrics and
    artifacts); whatever the store already holds of it is left as it is."""
    from jumplora.outputs import RESULTS

    results = read_results(run_dir / RESULTS, LOGGED)
    logged = dataclasses.replace(results, config=logged_config(results.config, results.lambdas))
    return log_completed_run(tracker, logged, run_dir, run_dir.name, run_key(run_dir, results.config),
                             tags=run_dir_tag(run_dir))


def close_interrupted(tracker: Tracker, run_dir: Path) -> list[str]:
    """The runs of a `jumplora run` directory that its dead process left RUNNING, set to KILLED; their names."""
    return tracker.close_running(RUN_DIR_TAG, run_dir_tag(run_dir)[RUN_DIR_TAG], "KILLED") if tracker else []


def log_completed_run(tracker: Tracker, results: RunResults, run_dir: Path | None, name: str, key: str,
                      parent: Run | None = None, fwt: float | None = None, fwt_last_row: float | None = None,
                      tags: dict | None = None) -> Run | None:
    """Log a finished run from its `results.json` payload (Ray drivers): parent, one child per training (per task;
    MTL: one), the end."""
    from jumplora.record import TaskRecord

    log = ContinualLogger(tracker, name, key, parent=parent)
    if log.begin(results.config, results.tasks, results.data_fingerprint, tags=tags) is None:
        return None
    for t in range(len(results.loss_curves["ce"])):
        log.on_task(t, TaskRecord.from_results(results, t))
    log.end(results, run_dir, fwt=fwt, fwt_last_row=fwt_last_row)
    return log.run
