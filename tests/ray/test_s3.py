"""grid_lambda.py with `--storage-path s3://…` on a local Ray of 2 CPUs, against an S3-compatible server (moto) on
127.0.0.1: checkpoints, manifest, run directory and tables land in the bucket, and a resubmission trains nothing.
The bucket is read with boto3, not through `Storage`."""

from __future__ import annotations

import json

import boto3
import pytest

from ray_jobs import grid, worker
from tests.ray.conftest import S3_BUCKET, cli_args

pytestmark = pytest.mark.usefixtures("s3_bucket", "local_ray")  # the server first: Ray inherits its variables
FOLDER = "grids/on-s3"
STAGE_LINE = " trainings, "  # "stage 1 (…): 2 trainings, 2 at a time", printed when a stage starts
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
