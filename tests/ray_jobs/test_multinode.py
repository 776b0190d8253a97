"""grid_lambda.py on a local two-node Ray cluster (`ray.cluster_utils.Cluster`): the head node, where the driver
runs, has no CPU, so every training runs on the second node (checked by the node ids that the worker processes
log), and stage 2 restores stage 1's choice from the shared storage (the S3 server of `s3_bucket`): checkpoints,
manifest, run directory and tables land in the bucket (read with boto3, not through `Storage`), and a resubmission
trains nothing; the warning for a local storage path on several nodes.

This module starts its own cluster, not `local_ray`, and leaves Ray shut down for the next module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
import ray.cluster_utils

from jumplora.storage import MANIFEST, RUN_DIR, Storage
from ray_jobs import cluster, grid_lambda
from tests.ray_jobs import faults
from tests.ray_jobs.conftest import RAY_CPUS, S3_BUCKET, cli_args, s3_keys, s3_read

FOLDER = "multinode/two-nodes"
STAGE_LINE = " at a time"  # "stage 1 (…): 1 trainings, 1 at a time", printed when a stage starts (only then)
RUN_FILES = ["results.json", "summary.txt", "updates.safetensors", "accuracy_matrix.csv"]


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("calls") / "calls.jsonl"


@pytest.fixture(scope="module")
def two_nodes(s3_bucket, tiny_cache, calls):
    """Head node (0 CPUs) and a worker node of 2 CPUs; yields the worker's node id. Started after the S3 server:
    every node inherits its variables. Every worker process logs its trainings and evaluations with its node id."""
    nodes = ray.cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        worker_node = nodes.add_node(num_cpus=RAY_CPUS)
        ray.init(address=nodes.address, log_to_driver=False,
                 runtime_env={"worker_process_setup_hook": faults.log_calls(str(calls))})
        yield worker_node.node_id
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.mark.timeout(180)  # mostly starting the two nodes
def test_a_local_storage_path_on_two_nodes_is_warned_about_and_a_uri_is_not(two_nodes, s3_bucket, tmp_path, capsys):
    cluster.warn_if_storage_not_shared(Storage(str(tmp_path)))
    assert f"--storage-path {tmp_path} is a local path but the Ray cluster has 2 nodes" in capsys.readouterr().err
    cluster.warn_if_storage_not_shared(Storage(f"{s3_bucket}/grids"))
    assert capsys.readouterr().err == ""


@pytest.mark.timeout(600)
def test_trials_run_on_the_other_node_and_restore_from_the_shared_storage(two_nodes, s3_bucket, tiny_cache, calls,
                                                                         capsys):
    args = cli_args(tiny_cache, f"{s3_bucket}/multinode", "--order", "1", "--max-tasks", "2", "--grid", "1e3",
                    "--name", "two-nodes")
    assert grid_lambda.SCRIPT(args) == 0
    assert capsys.readouterr().out.count(STAGE_LINE) == 2
    driver_node = ray.get_runtime_context().get_node_id()
    assert driver_node != two_nodes
    entries = [json.loads(line) for line in calls.read_text().splitlines()]
    # the trainings of the trials (task 1, the a0 run of task 2, task 2 with λ = 1e3) and the chosen checkpoints'
    # test rows (stage 1: task 1; stage 2: tasks 1, 2), read back from the storage by a task on that node
    assert sorted(entry["lam"] for entry in entries if "train" in entry) == [0.0, 0.0, 1e3]
    tests = sorted(len(entry["tasks"]) for entry in entries if entry.get("split") == "test")
    assert tests == [1, 1, 2]  # the a0 run of task 2, then the two chosen rows
    assert {entry["node"] for entry in entries} == {two_nodes}
    folder = Storage(f"{s3_bucket}/{FOLDER}")
    stages = folder.read_json(MANIFEST)["stages"]
    results = folder.child(RUN_DIR).read_json("results.json")
    # the final checkpoint holds task 1 as stage 1 trained it: stage 2 started from that checkpoint
    assert results["accuracy_matrix"][0][0] == pytest.approx(stages[0]["trials"][0]["test_mean"], abs=1e-12)
    assert results["lambdas"] == [0.0, 1e3] and stages[1]["trials"][0]["lam"] == 1e3

    # everything in the bucket: the manifest, the run directory, the tables, each checkpoint a path there holding files
    keys = s3_keys(f"{FOLDER}/")
    published = [f"{RUN_DIR}/{name}" for name in RUN_FILES] + ["grid_trials.csv", "grid_report.md"]
    assert {f"{FOLDER}/{name}" for name in [MANIFEST, *published]} <= keys
    for stage in stages:  # the trials' checkpoints and the next stage's start
        for path in [trial["checkpoint"] for trial in stage["trials"]] + [stage["checkpoint"]]:
            assert path.startswith(f"{S3_BUCKET}/{FOLDER}/task{stage['task']:02d}/")
            assert any(key.startswith(path.removeprefix(f"{S3_BUCKET}/") + "/") for key in keys)
    assert s3_read(f"{FOLDER}/grid_trials.csv").decode().count("\n") == 1 + 2
    before = {key: s3_read(key) for key in keys if not key.endswith(".png")}

    assert grid_lambda.SCRIPT(args) == 0  # resubmitted: resumed from the bucket; it trains and rewrites nothing
    out = capsys.readouterr().out
    assert STAGE_LINE not in out and f"grid folder: {s3_bucket}/{FOLDER}" in out
    assert s3_keys(f"{FOLDER}/") == keys  # no new trial, checkpoint or experiment state
    assert {key: s3_read(key) for key in before} == before  # the same manifest, run directory and tables
