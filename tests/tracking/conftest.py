"""One small tracked continual run for the whole tracking suite (two tasks of order 1, tiny preset, small caps):
interrupted after its first task and resumed, plus a second method for the comparison view."""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.entities import ViewType

import jumplora.continual
from jumplora.cli import main
from jumplora.results import RunResults, read_results
from tests.servers import free_port, stop_group

CAPS = ["--max-train-per-task", "65", "--max-eval-per-task", "16"]  # 3 optimizer steps per task
N_TASKS = 2
REGISTERED = "demo"  # the registered model of both runs' merged models: version 1 (main_dir), version 2 (other_dir)
OTHER_MODEL = ["--register-model", REGISTERED]  # the inclora run's (a registration implies saving the merged model)


@dataclasses.dataclass
class TrackedRuns:
    uri: str
    root: Path
    main_dir: Path  # jumplora+ella, interrupted after task 1, then resumed (with --save-merged-model, registered)
    other_dir: Path  # inclora (its merged model registered, the second version)
    interrupted_code: int

    def results(self, run_dir: Path) -> dict:
        return json.loads((run_dir / "results.json").read_text())

    def run_results(self, run_dir: Path) -> RunResults:
        return read_results(run_dir / "results.json")


def runs_of(client, experiment_id):
    return client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000)


def history(client, run_id, key):
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def run_args(out: Path, cache: Path, uri: str, *extra: str) -> list[str]:
    return ["run", "--quiet", "--order", "1", "--out", str(out), "--cache-dir", str(cache), "--tracking-uri", uri,
            *CAPS, *extra]


@pytest.fixture(scope="session")
def tracked(tmp_path_factory, tiny_cache) -> TrackedRuns:
    root = tmp_path_factory.mktemp("tracked")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    prepare, run_task = jumplora.continual.prepare, jumplora.continual.loop.run_task

    def first_tasks(*args, **kwargs):
        ws = prepare(*args, **kwargs)
        return dataclasses.replace(ws, tasks=ws.tasks[:N_TASKS], lambdas=ws.lambdas[:N_TASKS])

    def stop_at_second_task(ws, state, t, *rest):
        if t == 1:
            raise KeyboardInterrupt
        run_task(ws, state, t, *rest)

    main_dir, other_dir = root / "order1-jumplora+ella-seed42", root / "order1-inclora-seed42"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jumplora.continual, "prepare", first_tasks)
        with patch.context() as interrupt:
            interrupt.setattr(jumplora.continual.loop, "run_task", stop_at_second_task)
            interrupted = main(run_args(main_dir, tiny_cache, uri, "--method", "jumplora+ella"))
        assert main(run_args(main_dir, tiny_cache, uri, "--method", "jumplora+ella", "--save-merged-model",
                             "--register-model", REGISTERED)) == 0
        assert main(run_args(other_dir, tiny_cache, uri, "--method", "inclora", *OTHER_MODEL)) == 0
    return TrackedRuns(uri, root, main_dir, other_dir, interrupted)



def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def serving(store_uri: str, artifacts: Path, log_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`mlflow server` on a free port of 127.0.0.1 (one worker, no job execution) over `store_uri`, in a process
    group of its own; yields its URL and process, and stops the whole group afterwards (if it still runs)."""
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    with log_path.open("a") as log:
        server = subprocess.Popen(
            [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
             "--backend-store-uri", store_uri, "--artifacts-destination", str(artifacts)],
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy():
        assert server.poll() is None, log_path.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_until(healthy, 90, "mlflow server")
        yield url, server
    finally:
        stop_group(server, 30)  # SIGTERM stops the server's process tree
