"""`ray job submit` of the smoke grid to a `ray start --head` cluster with token authentication on.

The cluster runs on free ports and its own temp dir, with its own token file (RAY_AUTH_TOKEN_PATH), so it neither
meets nor stops anybody else's Ray on the machine: it is started with `--block` and stopped by signalling the
process group this test created (what `ray stop` would do, without stopping every Ray process of the machine)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jumplora.storage import RUN_DIR
from tests.servers import free_port, stop_group

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
START_SECONDS = 120
STOP_SECONDS = 15  # then the process group is killed
START_TRIES = 3  # a head that exits while starting is started again on other ports, its log kept for the failure


def wait_for_dashboard(url: str, process: subprocess.Popen, log: Path) -> bool:
    """True once the dashboard answers; False when the head exited first; fails after START_SECONDS."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            urllib.request.urlopen(f"{url}/api/version", timeout=5)
            return True
        except urllib.error.HTTPError:  # answering (perhaps refusing without a token): up
            return True
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    stop_group(process, STOP_SECONDS)
    raise AssertionError(f"the Ray head did not answer within {START_SECONDS} s: {log.read_text()[-3000:]}")


def start_head(temp: Path, env: dict[str, str]) -> tuple[str, subprocess.Popen]:
    """`ray start --head --block` on free ports, in a process group of its own; its URL and process once it answers."""
    for attempt in range(START_TRIES):
        dashboard = free_port()
        ports = {name: free_port() for name in ("port", "ray-client-server-port", "dashboard-agent-listen-port",
                                                "dashboard-agent-grpc-port", "runtime-env-agent-port",
                                                "metrics-export-port", "node-manager-port", "object-manager-port")}
        command = [RAY, "start", "--head", "--block", "--num-cpus=2", "--disable-usage-stats",
                   f"--temp-dir={temp}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
                   *(f"--{name}={port}" for name, port in ports.items())]
        log_path = temp / f"head-{attempt}.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        url = f"http://127.0.0.1:{dashboard}"
        if wait_for_dashboard(url, process, log_path):
            return url, process
        stop_group(process, STOP_SECONDS)
    raise AssertionError(f"the Ray head exited while starting, {START_TRIES} times; the last: exit code "
                         f"{process.returncode}: {log_path.read_text()[-3000:]}")


@pytest.fixture
def head_node(tiny_cache):
    """A `ray start --head` cluster of 2 CPUs started from this venv, with token authentication."""
    temp = Path(tempfile.mkdtemp(prefix="rayjob-", dir="/tmp"))  # short: Ray's socket paths live below it
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_ADDRESS", None)
    try:
        url, process = start_head(temp, env)
        try:
            yield url, env
        finally:
            stop_group(process, STOP_SECONDS)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.timeout(900)
def test_job_submit_runs_the_smoke_grid(head_node, tiny_cache, tmp_path):
    """The smoke grid of order 1 cut to its first task (one training): what is tested is the job's way onto the
    cluster (working dir, entry script, output); the grid itself is tests/ray_jobs/test_grid.py's."""
    url, env = head_node
    storage = tmp_path / "storage"
    command = [RAY, "job", "submit", "--address", url, "--working-dir", str(REPO), "--",
               "python", "ray_jobs/grid_lambda.py", "--order", "1", "--preset", "smoke",
               "--max-tasks", "1", "--cache-dir", str(tiny_cache),
               "--storage-path", str(storage), "--name", "submitted"]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=780)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "succeeded" in output, output[-4000:]
    assert "λ chosen per task" in output and "OA" in output
    results = json.loads((storage / "submitted" / RUN_DIR / "results.json").read_text())
    assert len(results["accuracy_matrix"]) == 1 and results["lambdas"] == [0.0]
    assert len((storage / "submitted" / "grid_trials.csv").read_text().splitlines()) == 1 + 1
