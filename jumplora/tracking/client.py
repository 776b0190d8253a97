"""The MLflow client of the project: `Tracker` logs to one store through `MlflowClient` (no global active run) and
never stops a run: any failure prints one warning line and switches tracking off for the rest of the process (a
command's store that cannot answer is refused before its run starts: `from_args`). Runs are found again by their
`jumplora.key` tag, so a resumed or repeated run reattaches instead of duplicating."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jumplora.runtime import provenance
from jumplora.tracking import ui
from jumplora.tracking.store import ARTIFACTS_DIR, INSTEAD, local_store_path, open_store, resolve_uri

KEY_TAG = "jumplora.key"
KIND_TAG = "jumplora.kind"  # run | grid | sweep | task | trial
PARENT_TAG = "mlflow.parentRunId"
ERROR_WIDTH = 300  # characters of a failure's message in the warning line


def key_of(*parts) -> str:
    """A deterministic identity for `jumplora.key`: a hash, so it is safe inside a search filter."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def process_rank() -> int:
    """This process's rank under torchrun-style launchers (0 when launched alone)."""
    return int(os.environ.get("RANK", "0") or 0)


def metric_name(text: str) -> str:
    """A metric's name or a param's key as MLflow takes them: letters, digits, `_ - . / :` and spaces; any other
    character written `_`."""
    return "".join(c if c.isalnum() or c in "_-./: " else "_" for c in text)


def version_tags() -> dict[str, str]:
    """`provenance` as the tags of every run started."""
    found = provenance()
    tags = {f"versions.{package}": value for package, value in found["versions"].items()}
    if found["git_commit"] is not None:
        tags["mlflow.source.git.commit"] = found["git_commit"]
        tags["jumplora.git_dirty"] = str(found["git_dirty"]).lower()
    return tags


def never_fatal(method):
    """`method` through `Tracker._call`: run while tracking is on; any failure → one warning, tracking off, None."""
    return functools.wraps(method)(lambda self, *args, **kwargs: self._call(method, self, *args, **kwargs))


@dataclass
class Run:
    run_id: str
    name: str
    experiment_id: str
    experiment: str
    finished: bool = False  # reattached to a run that had already finished: nothing more to log
    new: bool = True  # created now, not reattached
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Tracker:
    """Logging to one MLflow store through `MlflowClient` (no global active run). `uri=None`: a no-op."""

    def __init__(self, uri: str | None) -> None:
        self.uri = uri
        self.enabled = uri is not None and process_rank() == 0
        self.failed = False  # the store failed once: what was logged after that is missing (`jumplora track`)
        self.changes = 0  # writes to the store (runs created or reopened, values, artifacts, statuses)
        self._client = None
        self._experiments: dict[str, str] = {}

    def __bool__(self) -> bool:
        return self.enabled

    def _call(self, function, *args, **kwargs):
        """`function(*args)` if tracking is on; any failure → one warning, tracking off, None."""
        if not self.enabled:
            return None
        try:
            return function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - tracking must never stop a run
            if self.enabled:  # a nested call failed first: said once
                first_line = textwrap.shorten((str(error).strip().splitlines() or [type(error).__name__])[0],
                                              ERROR_WIDTH, placeholder=" …")  # cut between words, never inside one
                print(f"warning: MLflow tracking at {self.uri} failed ({type(error).__name__}: {first_line}); the "
                      "run goes on without tracking, its local results are unaffected", file=sys.stderr)
                self.failed = True
            self.enabled = False
            return None

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            # the registry in the same store (else MLflow may resolve another: the environment's, ./mlflow.db)
            self._client = MlflowClient(tracking_uri=open_store(self.uri, writes=True), registry_uri=self.uri)
        return self._client

    # --- experiments and runs

    def _experiment(self, name: str) -> str:
        """The experiment's id, created with the UI's tags (`ui.experiment_tags`) if missing; an experiment created
        before a tag existed, or whose view an earlier version wrote, gets it (`ui.missing_tags`)."""
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                store = local_store_path(self.uri)
                location = (store.parent / ARTIFACTS_DIR / name).as_uri() if store is not None else None
                try:
                    experiment_id = self.client.create_experiment(name, artifact_location=location,
                                                                  tags=ui.experiment_tags())
                except Exception:  # another process created it first
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
            if found is not None:
                experiment_id = found.experiment_id
                for key, value in ui.missing_tags(found.tags).items():
                    self.client.set_experiment_tag(experiment_id, key, value)
            self._experiments[name] = experiment_id
        return self._experiments[name]

    experiment = never_fatal(_experiment)

    @never_fatal
    def start(self, experiment: str, name: str, key: str, kind: str, parent: Run | None = None,
              tags: dict | None = None, replace: bool = False, reopen: bool = False) -> Run | None:
        """The run with tag `jumplora.key` = `key` in `experiment` (reattached), or a new one. `replace`: delete
        what has that key first (a run started over from scratch). `reopen`: a FINISHED run found is set running
        again (a sweep resubmitted with more runs), instead of being left alone. `tags` go on a new run only, beside
        the key, the kind and the package versions and git commit (`version_tags`)."""
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
            run = Run(existing.info.run_id, name, experiment_id, experiment, finished=finished, new=False,
                      params=dict(existing.data.params), metrics=dict(existing.data.metrics))
            if not run.finished and existing.info.status != "RUNNING":
                self.client.update_run(run.run_id, status="RUNNING")
                self.changes += 1
            return run
        all_tags = {KEY_TAG: key, KIND_TAG: kind, **version_tags(), **(tags or {})}
        if parent is not None:
            all_tags[PARENT_TAG] = parent.run_id
        created = self.client.create_run(experiment_id, tags=all_tags, run_name=name)
        self.changes += 1
        return Run(created.info.run_id, name, experiment_id, experiment)

    def _delete_tree(self, experiment_id: str, run_id: str) -> None:
        from mlflow.entities import ViewType

        for child in self.client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{run_id}'",
                                             run_view_type=ViewType.ACTIVE_ONLY):
            self._delete_tree(experiment_id, child.info.run_id)
        self.client.delete_run(run_id)

    @never_fatal
    def log(self, run: Run | None, params: dict | None = None, metrics: dict | None = None,
            curves: dict[str, list[float]] | None = None, steps: dict[str, tuple[int, float]] | None = None,
            tags: dict | None = None) -> None:
        """Params (those already there are skipped), single metrics (skipped when already there with that value),
        `curves` (one value per step 0..n−1, skipped when the key is there), `steps` ({key: (step, value)})."""
        if run is None:
            return
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        new_params = [Param(k, str(v)[:6000]) for k, v in (params or {}).items() if k not in run.params]
        entries = [Metric(metric_name(k), float(v), now, 0) for k, v in (metrics or {}).items()
                   if v is not None and run.metrics.get(metric_name(k)) != float(v)]
        for key, values in (curves or {}).items():
            if metric_name(key) not in run.metrics:
                entries += [Metric(metric_name(key), float(v), now, step) for step, v in enumerate(values)]
        entries += [Metric(metric_name(k), float(v), now, step) for k, (step, v) in (steps or {}).items()]
        run_tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for start in range(0, max(len(new_params), len(run_tags)), 100):
            self.client.log_batch(run.run_id, params=new_params[start:start + 100], tags=run_tags[start:start + 100])
        for start in range(0, len(entries), 1000):
            self.client.log_batch(run.run_id, metrics=entries[start:start + 1000])
        self.changes += bool(new_params or run_tags or entries)
        run.params.update({p.key: p.value for p in new_params})
        run.metrics.update({m.key: m.value for m in entries})

    @never_fatal
    def artifacts(self, run: Run | None, paths: Iterable[Path]) -> None:
        if run is None:
            return
        for path in paths:
            if path.is_dir():
                self.client.log_artifacts(run.run_id, str(path), artifact_path=path.name)
            elif path.exists():
                self.client.log_artifact(run.run_id, str(path))
            self.changes += 1

    def steps(self, run: Run, key: str) -> set[int]:
        """The steps at which `run` has a value of the metric `key`."""
        return self._call(lambda: {m.step for m in self.client.get_metric_history(run.run_id, metric_name(key))}) \
            or set()

    def close_running(self, tag: str, value: str, status: str) -> list[str]:
        """Set every RUNNING run tagged `tag` = `value` (a hash: safe in a filter), in any experiment, and its
        RUNNING descendants to `status` (KILLED: their process is gone); their names."""
        return self._call(self._close_running, tag, value, status) or []

    def _close_running(self, tag: str, value: str, status: str) -> list[str]:
        from mlflow.entities import ViewType

        ids = [e.experiment_id for e in self.client.search_experiments(view_type=ViewType.ACTIVE_ONLY)]
        closed, todo = [], self.client.search_runs(ids, filter_string=f"tags.`{tag}` = '{value}'")
        while todo:
            run = todo.pop()
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, status)
                self.changes += 1
                closed.append(run.info.run_name)
            todo += self.client.search_runs(ids, filter_string=f"tags.`{PARENT_TAG}` = '{run.info.run_id}'")
        return closed

    def finish(self, run: Run | None, status: str = "FINISHED") -> None:
        if run is not None and not (run.finished and status == "FINISHED"):
            self._call(self.client.set_terminated, run.run_id, status)
            self.changes += 1
            run.finished = status == "FINISHED"


def logged_since(tracker: Tracker, changes: int) -> str:
    """What `jumplora track` did to a source, given the tracker's `changes` before it: "logged" or "nothing new"."""
    return "logged" if tracker.changes > changes else "nothing new (the store already holds all of it)"


def from_args(args: argparse.Namespace, root: str | Path | None = None) -> Tracker:
    """The tracker of a command's `--tracking-uri` / `--no-tracking` (`store.add_options`), its store checked up
    front (`store.open_store`: one that cannot answer is refused in one line); afterwards a failure is one warning."""
    if getattr(args, "no_tracking", False):
        return Tracker(None)
    uri = resolve_uri(getattr(args, "tracking_uri", None), root)
    if process_rank() == 0:  # the one process that logs
        open_store(uri, writes=True, instead=f"{INSTEAD} or --no-tracking")
    return Tracker(uri)
