"""grid_lambda.py with `--storage-path s3://…` on a local Ray of 2 CPUs, against an S3-compatible server (moto) on
127.0.0.1: checkpoints, manifest, run directory and tables land in the bucket, and a resubmission trains nothing.
The bucket is read with boto3, not through `Storage`."""

from __future__ import annotations

import json
import time

import boto3
import pytest

from jumplora.lock import Holder, LockedError
from ray_jobs import grid, storage, worker
from ray_jobs.storage import Storage
from tests.ray.conftest import S3_BUCKET, cli_args

pytestmark = pytest.mark.usefixtures("s3_bucket", "local_ray")  # the server first: Ray inherits its variables
FOLDER = "grids/on-s3"
STAGE_LINE = " at a time"  # "stage 1 (…): 2 trainings, 2 at a time", printed when a stage starts (only then)
RUN_FILES = ["results.json", "summary.txt", "updates.safetensors", "accuracy_matrix.csv"]


def bucket_keys() -> set[str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=f"{FOLDER}/")
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def read(key: str) -> bytes:
    return boto3.client("s3").get_object(Bucket=S3_BUCKET, Key=key)["Body"].read()


@pytest.mark.timeout(600)
def test_a_grid_on_s3_keeps_everything_in_the_bucket_and_resumes_from_it(s3_bucket, smoke_cache, capsys):
    args = cli_args(smoke_cache, f"{s3_bucket}/grids", "--order", "1", "--max-tasks", "2", "--grid", "1,1e3",
                    "--name", "on-s3")
    assert grid.main(args) == 0
    assert capsys.readouterr().out.count(STAGE_LINE) == 2
    keys = bucket_keys()
    published = [f"{worker.RUN_DIR}/{name}" for name in RUN_FILES] + ["grid_trials.csv", "grid_report.md"]
    assert {f"{FOLDER}/{name}" for name in [grid.MANIFEST, *published]} <= keys
    stages = json.loads(read(f"{FOLDER}/{grid.MANIFEST}"))["stages"]
    assert [[trial["lam"] for trial in stage["trials"]] for stage in stages] == [[0.0], [1.0, 1e3]]
    for stage in stages:  # each checkpoint a path in the bucket, holding files: the trials' and the next start
        for path in [trial["checkpoint"] for trial in stage["trials"]] + [stage["checkpoint"]]:
            assert path.startswith(f"{S3_BUCKET}/{FOLDER}/task{stage['task']:02d}/")
            assert any(key.startswith(path.removeprefix(f"{S3_BUCKET}/") + "/") for key in keys)
    results = json.loads(read(f"{FOLDER}/{worker.RUN_DIR}/results.json"))
    assert results["lambdas"] == [stage["selected_lam"] for stage in stages] and len(results["tasks"]) == 2
    assert read(f"{FOLDER}/grid_trials.csv").decode().count("\n") == 1 + 3
    before = {key: read(key) for key in keys if not key.endswith(".png")}

    assert grid.main(args) == 0
    out = capsys.readouterr().out
    assert STAGE_LINE not in out and f"grid folder: {s3_bucket}/{FOLDER}" in out
    assert bucket_keys() == keys  # no new trial, checkpoint or experiment state
    assert {key: read(key) for key in before} == before  # the same manifest, run directory and tables


def test_an_s3_folder_has_one_driver_by_a_lease_and_an_expired_lease_is_taken_over(s3_bucket, monkeypatch, capsys):
    """No atomic create on an object store: a lease object beside the folder, written, read back after a settling
    wait, renewed by its driver; a second driver is refused naming the holder, an expired lease is taken over."""
    monkeypatch.setattr(storage, "SETTLE_SECONDS", 0.1)
    leases = Storage(f"{s3_bucket}/leases")
    with leases.lock("grid", "grid_lambda.py") as lease:
        assert json.loads(read("leases/.grid.lock")) == json.loads(lease.holder.to_text())
        assert lease.holder.expires > time.time() + storage.LEASE_SECONDS - 60
        with pytest.raises(LockedError, match=rf"^{s3_bucket}/leases/grid is being written by `grid_lambda.py` \("
                                              rf"pid {lease.holder.pid} on "):
            leases.lock("grid", "grid_lambda.py").acquire()
        assert leases.holder("grid") == lease.holder
    assert not leases.exists(".grid.lock") and leases.holder("grid") is None  # released

    stale = Holder("another-node", 4242, "2020-01-01T00:00:00+00:00", "grid_lambda.py", "t0", None, time.time() - 1)
    leases.write_text(".grid.lock", stale.to_text())  # its driver stopped renewing it
    assert leases.holder("grid") is None
    with leases.lock("grid", "grid_lambda.py") as lease:
        assert leases.holder("grid") == lease.holder
    assert capsys.readouterr().err == (f"warning: taking over the lock of {s3_bucket}/leases/grid from "
                                       f"{stale.describe()}, whose lease expired\n")
