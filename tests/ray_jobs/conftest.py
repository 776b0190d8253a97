"""Fixtures of the Ray tests: one local Ray (2 CPUs) per module, the session's tiny-preset cache, smoke settings, an
S3-compatible server.

The tiny presets are built once per session (`tiny_cache` of tests/conftest.py; JUMPLORA_TEST_CACHE keeps them
between sessions), one build at a time: a Ray worker that needs a preset still being built waits for it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
import ray

from jumplora import spaces
from tests.ray_jobs import faults
from tests.servers import free_port

RAY_CPUS = 2
SMOKE = {**spaces.preset("smoke"), "model_dropout": 0.0}  # dropout off: DDP and one process compute the same
SMOKE_ARGS = ["--preset", "smoke", "--model-dropout", "0"]
S3_BUCKET = "jumplora-test"
S3_START_SECONDS = 60


@pytest.fixture(scope="module")
def local_ray(tiny_cache):
    """A local Ray of 2 CPUs for the module; stopped afterwards so that the next module starts clean."""
    ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)  # never a `ray start`
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> Path:
    """Where the module's `logging_ray` workers log their calls, one JSON line each (`faults.log_calls`)."""
    return tmp_path_factory.mktemp("calls") / "calls.jsonl"


@pytest.fixture(scope="module")
def logging_ray(tiny_cache, calls):
    """`local_ray` whose worker processes log every evaluation, task training and optimizer step to `calls`."""
    ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": faults.log_calls(str(calls))})
    yield
    ray.shutdown()


def cli_args(cache: Path, storage: Path, *extra: str) -> list[str]:
    return [*SMOKE_ARGS, "--cache-dir", str(cache), "--storage-path", str(storage), *extra]



@pytest.fixture(scope="module")
def s3_bucket(tmp_path_factory):
    """`s3://jumplora-test` on a moto S3 server on a free port of 127.0.0.1, reached as any S3 endpoint is: through
    the standard AWS variables, set before the module's Ray starts so that every Ray process inherits them. Request
    it before `local_ray` (or the module's cluster). The server and the variables are gone afterwards."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                   endpoint.rsplit(":", 1)[1]], stdout=out, stderr=subprocess.STDOUT)
    patch = pytest.MonkeyPatch()
    try:
        wait_until_answers(endpoint, server, log)
        for key, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                           "AWS_DEFAULT_REGION": "us-east-1"}.items():
            patch.setenv(key, value)
        for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
            patch.delenv(key, raising=False)
        boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
        yield f"s3://{S3_BUCKET}"
    finally:
        patch.undo()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def s3_keys(prefix: str) -> set[str]:
    """The keys under `prefix` in the test bucket, read with boto3 (not through `Storage`)."""
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def s3_read(key: str) -> bytes:
    return boto3.client("s3").get_object(Bucket=S3_BUCKET, Key=key)["Body"].read()


def wait_until_answers(endpoint: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + S3_START_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise AssertionError(f"the S3 server did not start (exit code {server.poll()}): {log.read_text()[-2000:]}")
