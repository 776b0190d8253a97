"""MLflow tracking of continual runs, λ grids and sweeps, from rank 0 (or a Ray driver) only.

One store for every run: `sqlite:///<runs root>/mlflow.db` (runs root `./runs`, made absolute), or
`MLFLOW_TRACKING_URI`, or `--tracking-uri`; `--no-tracking` turns it off. One experiment per task order
(`jumplora-order<N>`). A parent run per continual run, grid or sweep; a child run per task and per (task, λ) trial.
Every run carries a deterministic `jumplora.key` tag, so a resumed or repeated run finds its runs and reattaches:
a child that is already FINISHED is left as it is, so nothing is logged twice.

Tracking never stops a run: if the store or server fails, one warning line is printed, tracking is switched off for
the rest of the process and the run finishes with its local results intact."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

URI_ENV = "MLFLOW_TRACKING_URI"
RUNS_ROOT_ENV = "JUMPLORA_RUNS_ROOT"
DEFAULT_RUNS_ROOT = "runs"
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # artifacts of a local sqlite store, beside it
KEY_TAG = "jumplora.key"
KIND_TAG = "jumplora.kind"  # run | grid | sweep | task | trial
PARENT_TAG = "mlflow.parentRunId"
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"  # UI: runs, not traces
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's entrypoint
PACKAGES = ("torch", "transformers", "peft", "tokenizers", "safetensors", "numpy", "mlflow", "ray")


# ---------------------------------------------------------------- where the store is


def runs_root(root: str | Path | None = None) -> Path:
    """The runs root, absolute: `root`, else `JUMPLORA_RUNS_ROOT`, else `./runs`."""
    return Path(root or os.environ.get(RUNS_ROOT_ENV) or DEFAULT_RUNS_ROOT).expanduser().resolve()


def default_uri(root: str | Path | None = None) -> str:
    return f"sqlite:///{runs_root(root) / STORE_FILE}"


def resolve_uri(cli_uri: str | None = None, root: str | Path | None = None) -> str:
    """`--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the default store under the runs root."""
    uri = cli_uri or os.environ.get(URI_ENV) or default_uri(root)
    warn_if_temporary(uri)
    return uri


def local_store_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI (None for a server)."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def in_ray_job_working_dir(path: Path) -> bool:
    """True when `path` lies in the temporary copy of the working directory that `ray job submit` runs in."""
    path = path.resolve()
    if "runtime_resources" in path.parts or "working_dir_files" in path.parts:
        return True
    job = os.environ.get(RAY_JOB_ENV, "")
    return '"working_dir"' in job and path.is_relative_to(Path.cwd().resolve())


def warn_if_temporary(uri: str) -> bool:
    store = local_store_path(uri)
    if store is None or not in_ray_job_working_dir(store):
        return False
    print(f"warning: the MLflow store {store} lies in the Ray job's temporary working directory and goes away with "
          "it: pass --tracking-uri sqlite:////absolute/path/mlflow.db (or an http:// server)", file=sys.stderr)
    return True


def experiment_name(order: int) -> str:
    return f"jumplora-order{order}"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<runs>/mlflow.db)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")


def from_args(args: argparse.Namespace, root: str | Path | None = None) -> Tracker:
    if getattr(args, "no_tracking", False):
        return Tracker(None)
    return Tracker(resolve_uri(getattr(args, "tracking_uri", None), root))


def process_rank() -> int:
    """This process's rank under torchrun-style launchers (0 when launched alone)."""
    return int(os.environ.get("RANK", "0") or 0)


# ---------------------------------------------------------------- what is logged


def key_of(*parts) -> str:
    """A deterministic identity for `jumplora.key`: a hash, so it is safe inside a search filter."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def flat_params(data: dict, prefix: str = "") -> dict[str, str]:
    """Every value as one param: nested dicts as `a.b`, lists as JSON, None as `None`."""
    out: dict[str, str] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{key}."))
        elif isinstance(value, list | tuple | dict):
            out[key] = json.dumps(list(value) if isinstance(value, tuple) else value)
        else:
            out[key] = str(value)
    return out


def git_commit() -> tuple[str, bool] | None:
    """(commit, dirty) of the repository this package lives in; None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if commit.returncode:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None


def version_tags() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    tags = {"versions.python": platform.python_version()}
    for package in ("jumplora", *PACKAGES):
        with contextlib.suppress(PackageNotFoundError):
            tags[f"versions.{package}"] = version(package)
    commit = git_commit()
    if commit is not None:
        tags["mlflow.source.git.commit"] = commit[0]
        tags["jumplora.git_dirty"] = str(commit[1]).lower()
    return tags


@dataclass
class TaskData:
    """What one finished task of a continual run logs."""

    index: int
    task: str
    lam: float
    ce: list[float]
    penalty: list[float]
    thresholds: dict[str, float]
    sparsity: dict[str, float]  # "overall" and per block
    test_row: dict[str, float]  # task j → a[t][j], j ≤ t
    dev_row: dict[str, float]


def seen_row(tasks, matrix: list[list[float | None]], t: int) -> dict[str, float]:
    """Row t of an accuracy matrix over the tasks seen so far: task j → a[t][j], j ≤ t."""
    return {tasks[j]: matrix[t][j] for j in range(t + 1)}


def task_from_results(results: dict, t: int) -> TaskData:
    tasks = results["tasks"]
    sparsity = results["sparsity"][t]
    return TaskData(
        index=t, task=tasks[t], lam=float(results["lambdas"][t]), ce=results["loss_curves"]["ce"][t],
        penalty=results["loss_curves"]["penalty"][t], thresholds=results["thresholds"][t],
        sparsity={"overall": sparsity["overall"], **sparsity["per_layer"]},
        test_row=seen_row(tasks, results["accuracy_matrix"], t),
        dev_row=seen_row(tasks, results["dev_accuracy_matrix"], t))


def task_from_state(ws, state, t: int) -> TaskData:
    from jumplora import analysis

    updates = state.task_updates[t]
    return TaskData(
        index=t, task=ws.tasks[t], lam=float(ws.lambdas[t]), ce=state.ce[t], penalty=state.penalty[t],
        thresholds=state.thresholds[t],
        sparsity={"overall": analysis.overall_sparsity(updates), **analysis.layer_sparsity(updates)},
        test_row=seen_row(ws.tasks, state.accuracy, t), dev_row=seen_row(ws.tasks, state.dev_accuracy, t))


def task_run_name(t: int, task: str) -> str:
    return f"task{t + 1:02d}-{task}"


def metric_name(text: str) -> str:
    """MLflow metric names take letters, digits, `_ - . / :` and spaces."""
    return "".join(c if c.isalnum() or c in "_-./: " else "_" for c in text)


# ---------------------------------------------------------------- the MLflow side


@dataclass
class Run:
    run_id: str
    name: str
    experiment_id: str
    experiment: str
    finished: bool = False  # reattached to a run that had already finished: nothing more to log
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Tracker:
    """Logging to one MLflow store through `MlflowClient` (no global active run). `uri=None`: a no-op."""

    def __init__(self, uri: str | None, rank: int | None = None) -> None:
        self.uri = uri
        self.enabled = uri is not None and (process_rank() if rank is None else rank) == 0
        self._client = None
        self._experiments: dict[str, str] = {}

    def __bool__(self) -> bool:
        return self.enabled

    def _failed(self, error: BaseException) -> None:
        if self.enabled:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            print(f"warning: MLflow tracking at {self.uri} failed ({type(error).__name__}: {first_line}); the run "
                  "goes on without tracking, its local results are unaffected", file=sys.stderr)
        self.enabled = False

    def _call(self, function, *args, **kwargs):
        """`function(*args)` if tracking is on; any failure → one warning, tracking off, None."""
        if not self.enabled:
            return None
        try:
            return function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - tracking must never stop a run
            self._failed(error)
            return None

    @property
    def client(self):
        if self._client is None:
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # a dead server: fail in seconds
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
            from mlflow import MlflowClient

            if self.uri.startswith(("http://", "https://")):
                check_server(self.uri)
            store = local_store_path(self.uri)
            if store is not None:
                store.parent.mkdir(parents=True, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    # --- experiments and runs

    def experiment(self, name: str) -> str | None:
        return self._call(self._experiment, name)

    def _experiment(self, name: str) -> str:
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                store = local_store_path(self.uri)
                location = (store.parent / ARTIFACTS_DIR / name).as_uri() if store is not None else None
                try:
                    experiment_id = self.client.create_experiment(name, artifact_location=location,
                                                                  tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
                except Exception:  # another process created it first
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
                    experiment_id = found.experiment_id
            else:
                experiment_id = found.experiment_id
            self._experiments[name] = experiment_id
        return self._experiments[name]

    def start(self, experiment: str, name: str, key: str, kind: str, parent: Run | None = None,
              tags: dict | None = None, replace: bool = False, reopen: bool = False) -> Run | None:
        """The run with tag `jumplora.key` = `key` in `experiment` (reattached), or a new one. `replace`: delete
        what has that key first (a run started over from scratch). `reopen`: a FINISHED run found is set running
        again (a sweep resubmitted with more runs), instead of being left alone."""
        return self._call(self._start, experiment, name, key, kind, parent, tags or {}, replace, reopen)

    def _start(self, experiment: str, name: str, key: str, kind: str, parent: Run | None, tags: dict,
               replace: bool, reopen: bool) -> Run:
        from mlflow.entities import ViewType

        experiment_id = self._experiment(experiment)
        found = self.client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'",
                                        run_view_type=ViewType.ACTIVE_ONLY, order_by=["attributes.start_time ASC"])
        if replace:
            for old in found:
                self._delete_tree(experiment_id, old.info.run_id)
            found = []
        if found:
            existing = found[0]
            finished = existing.info.status == "FINISHED" and not reopen
            run = Run(existing.info.run_id, name, experiment_id, experiment, finished=finished,
                      params=dict(existing.data.params), metrics=dict(existing.data.metrics))
            if not run.finished and existing.info.status != "RUNNING":
                self.client.update_run(run.run_id, status="RUNNING")
            return run
        all_tags = {KEY_TAG: key, KIND_TAG: kind, **version_tags(), **tags}
        if parent is not None:
            all_tags[PARENT_TAG] = parent.run_id
        created = self.client.create_run(experiment_id, tags=all_tags, run_name=name)
        return Run(created.info.run_id, name, experiment_id, experiment)

    def _delete_tree(self, experiment_id: str, run_id: str) -> None:
        from mlflow.entities import ViewType

        for child in self.client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{run_id}'",
                                             run_view_type=ViewType.ACTIVE_ONLY):
            self._delete_tree(experiment_id, child.info.run_id)
        self.client.delete_run(run_id)

    def log(self, run: Run | None, params: dict | None = None, metrics: dict | None = None,
            curves: dict[str, list[float]] | None = None, steps: dict[str, tuple[int, float]] | None = None,
            tags: dict | None = None) -> None:
        """Params (those already there are skipped), single metrics (skipped when already there with that value),
        `curves` (one value per step 0..n−1, skipped when the key is there), `steps` ({key: (step, value)})."""
        if run is not None:
            self._call(self._log, run, params or {}, metrics or {}, curves or {}, steps or {}, tags or {})

    def _log(self, run: Run, params: dict, metrics: dict, curves: dict, steps: dict, tags: dict) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        new_params = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in run.params]
        entries = [Metric(metric_name(k), float(v), now, 0) for k, v in metrics.items()
                   if v is not None and run.metrics.get(metric_name(k)) != float(v)]
        for key, values in curves.items():
            if metric_name(key) not in run.metrics:
                entries += [Metric(metric_name(key), float(v), now, step) for step, v in enumerate(values)]
        entries += [Metric(metric_name(k), float(v), now, step) for k, (step, v) in steps.items()]
        run_tags = [RunTag(k, str(v)) for k, v in tags.items()]
        for start in range(0, max(len(new_params), len(run_tags)), 100):
            self.client.log_batch(run.run_id, params=new_params[start:start + 100], tags=run_tags[start:start + 100])
        for start in range(0, len(entries), 1000):
            self.client.log_batch(run.run_id, metrics=entries[start:start + 1000])
        run.params.update({p.key: p.value for p in new_params})
        run.metrics.update({m.key: m.value for m in entries})

    def artifacts(self, run: Run | None, paths: Iterable[Path], artifact_path: str | None = None) -> None:
        if run is not None:
            self._call(self._artifacts, run, list(paths), artifact_path)

    def _artifacts(self, run: Run, paths: list[Path], artifact_path: str | None) -> None:
        for path in paths:
            if path.is_dir():
                self.client.log_artifacts(run.run_id, str(path), artifact_path=path.name if artifact_path is None
                                          else f"{artifact_path}/{path.name}")
            elif path.exists():
                self.client.log_artifact(run.run_id, str(path), artifact_path=artifact_path)

    def finish(self, run: Run | None, status: str = "FINISHED") -> None:
        if run is not None and not (run.finished and status == "FINISHED"):
            self._call(self.client.set_terminated, run.run_id, status)
            run.finished = status == "FINISHED"


def check_server(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (OSError) when an http(s) tracking server does not answer."""
    with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as response:
        response.read()


# ---------------------------------------------------------------- continual runs


def log_task(tracker: Tracker, parent: Run | None, data: TaskData, key: str) -> Run | None:
    """A task's child run: CE and λ·P curves, τ and sparsity per group, the accuracy rows; plus the rows as step
    metrics of the parent (step = task index), so the parent's charts show every task's accuracy over the run."""
    if parent is None:
        return None
    child = tracker.start(parent.experiment, task_run_name(data.index, data.task),
                          key_of(key, "task", data.index), "task", parent=parent)
    if child is None or child.finished:
        return child
    metrics = {f"tau/{group}": value for group, value in data.thresholds.items()}
    metrics.update({f"sparsity/{group}": value for group, value in data.sparsity.items()})
    metrics.update({f"test_accuracy/{j + 1:02d}-{task}": v for j, (task, v) in enumerate(data.test_row.items())})
    metrics.update({f"dev_accuracy/{j + 1:02d}-{task}": v for j, (task, v) in enumerate(data.dev_row.items())})
    metrics["seen_test_mean"] = sum(data.test_row.values()) / len(data.test_row)
    metrics["seen_dev_mean"] = sum(data.dev_row.values()) / len(data.dev_row)
    metrics["lambda"] = data.lam
    tracker.log(child, params={"task": data.task, "task_index": data.index + 1, "lambda": data.lam},
                metrics=metrics, curves={"ce": data.ce, "lambda_penalty": data.penalty})
    tracker.finish(child)
    steps = {f"test_accuracy/{j + 1:02d}-{task}": (data.index, v) for j, (task, v) in enumerate(data.test_row.items())}
    steps.update({"seen_test_mean": (data.index, metrics["seen_test_mean"]),
                  "seen_dev_mean": (data.index, metrics["seen_dev_mean"]), "lambda": (data.index, data.lam),
                  "sparsity": (data.index, data.sparsity["overall"])})
    tracker.log(parent, steps=steps)
    return child


def final_metrics(results: dict) -> dict[str, float | None]:
    return {"OA": results["oa"], "BWT": results["bwt"], "FWT": results.get("fwt")}


def run_params(results_or_config: dict, tasks: list[str], fingerprint: str | None = None) -> dict:
    params = flat_params(results_or_config, "config.")
    params["tasks"] = json.dumps(tasks)
    if fingerprint:
        params["data_fingerprint"] = fingerprint
    return params


def run_dir_artifacts(run_dir: Path) -> list[Path]:
    """What a run directory contributes as artifacts: results, CSV, summary, plots, updates, a merged model."""
    from jumplora.outputs import ACCURACY_CSV, RESULTS, SUMMARY, UPDATES

    files = [run_dir / name for name in (RESULTS, ACCURACY_CSV, SUMMARY, UPDATES)]
    files += sorted(run_dir.glob("*.png"))
    merged = run_dir / MERGED_MODEL_DIR
    return [p for p in files if p.exists()] + ([merged] if merged.is_dir() else [])


MERGED_MODEL_DIR = "merged_model"


class ContinualLogger:
    """Live logging of one continual run: `begin` → `on_task` after each task → `end` (or `fail`)."""

    def __init__(self, tracker: Tracker, name: str, key: str, parent: Run | None = None,
                 experiment: str | None = None, kind: str = "run") -> None:
        self.tracker, self.name, self.key, self.parent = tracker, name, key, parent
        self.experiment, self.kind = experiment, kind
        self.run: Run | None = None

    def begin(self, config: dict, tasks: list[str], fingerprint: str | None = None, replace: bool = False,
              tags: dict | None = None) -> Run | None:
        experiment = self.experiment or experiment_name(config["order"])
        self.run = self.tracker.start(experiment, self.name, self.key, self.kind, parent=self.parent, tags=tags,
                                      replace=replace)
        if self.run is not None and not self.run.finished:
            self.tracker.log(self.run, params=run_params(config, tasks, fingerprint))
        return self.run

    def on_task(self, data: TaskData) -> None:
        if self.run is not None and not self.run.finished:
            log_task(self.tracker, self.run, data, self.key)

    def end(self, results: dict, run_dir: Path | None, extra_artifacts: Iterable[Path] = (),
            fwt: float | None = None) -> None:
        if self.run is None or self.run.finished:
            return
        metrics = final_metrics(results)
        if fwt is not None:
            metrics["FWT"] = fwt
        metrics.update({f"lambda/{t + 1:02d}-{task}": lam
                        for t, (task, lam) in enumerate(zip(results["tasks"], results["lambdas"], strict=True))})
        self.tracker.log(self.run, metrics=metrics)
        paths = run_dir_artifacts(run_dir) if run_dir is not None else []
        self.tracker.artifacts(self.run, [*paths, *extra_artifacts])
        self.tracker.finish(self.run)

    def fail(self, status: str = "FAILED") -> None:
        if self.run is not None and not self.run.finished:
            self.tracker.finish(self.run, status)


def log_completed_run(tracker: Tracker, results: dict, run_dir: Path | None, name: str, key: str,
                      parent: Run | None = None, experiment: str | None = None, kind: str = "run",
                      extra_artifacts: Iterable[Path] = (), fwt: float | None = None,
                      tags: dict | None = None) -> Run | None:
    """Log a finished run from its `results.json` payload (Ray drivers): parent, one child per task, the end."""
    if not tracker:
        return None
    log = ContinualLogger(tracker, name, key, parent=parent, experiment=experiment, kind=kind)
    if log.begin(results["config"], results["tasks"], results.get("data_fingerprint"), tags=tags) is None:
        return None
    for t in range(len(results["tasks"])):
        log.on_task(task_from_results(results, t))
    log.end(results, run_dir, extra_artifacts, fwt=fwt)
    return log.run


def finish_run_dir(run_dir: Path, results: dict) -> list[Path]:
    """The files derived from `results.json` in a run directory: the accuracy CSV and the plots."""
    from jumplora.outputs import ACCURACY_CSV, accuracy_csv, atomic_write_text

    atomic_write_text(run_dir / ACCURACY_CSV, accuracy_csv(results))
    try:
        from jumplora import plots
    except ImportError as error:  # matplotlib is in the `tracking` extra
        logger.warning("no plots (%s): install the tracking extra", error)
        return [run_dir / ACCURACY_CSV]
    return [run_dir / ACCURACY_CSV, *plots.run_plots(results, run_dir)]
