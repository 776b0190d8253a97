"""grid_lambda.py on a local two-node Ray cluster (`ray.cluster_utils.Cluster`): the head node, where the driver
runs, has no CPU, so every training runs on the second node, and stage 2 restores stage 1's choice from the shared
storage (the S3 server of `s3_bucket`); the warning for a local storage path on several nodes.

This module starts its own cluster, not `local_ray`, and leaves Ray shut down for the next module."""

from __future__ import annotations

import pytest
import ray
import ray.cluster_utils
from ray.util import state

from ray_jobs import cluster, grid, worker
from ray_jobs.storage import Storage
from tests.ray.conftest import RAY_CPUS, cli_args, free_port


@pytest.fixture(scope="module")
def two_nodes(s3_bucket, smoke_cache):
    """Head node (0 CPUs, the dashboard for the state API) and a worker node of 2 CPUs; yields the worker's node id.
    Started after the S3 server: every node inherits its variables."""
    nodes = ray.cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": True, "dashboard_port": free_port()})
    try:
        worker_node = nodes.add_node(num_cpus=RAY_CPUS)
        ray.init(address=nodes.address, log_to_driver=False)
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
def test_trials_run_on_the_other_node_and_restore_from_the_shared_storage(two_nodes, s3_bucket, smoke_cache):
    args = cli_args(smoke_cache, f"{s3_bucket}/multinode", "--order", "1", "--max-tasks", "2", "--grid", "1e3",
                    "--name", "two-nodes")
    assert grid.main(args) == 0
    driver_node = ray.get_runtime_context().get_node_id()
    assert driver_node != two_nodes
    trials = state.list_actors(filters=[("class_name", "=", "ImplicitFunc")], raise_on_missing_output=False)
    restoring = (worker.with_test_row.__name__, worker.publish_checkpoint.__name__)  # read checkpoints from storage
    tasks = [task for task in state.list_tasks(raise_on_missing_output=False) if task.func_or_class_name in restoring]
    assert len(trials) >= 1 and len(tasks) == 3  # a test row per stage, the run directory
    assert {actor.node_id for actor in trials} | {task.node_id for task in tasks} == {two_nodes}
    folder = Storage(f"{s3_bucket}/multinode/two-nodes")
    stages = folder.read_json(grid.MANIFEST)["stages"]
    results = folder.child(worker.RUN_DIR).read_json("results.json")
    # the final checkpoint holds task 1 as stage 1 trained it: stage 2 started from that checkpoint
    assert results["accuracy_matrix"][0][0] == pytest.approx(stages[0]["trials"][0]["test_mean"], abs=1e-12)
    assert results["lambdas"] == [0.0, 1e3] and stages[1]["trials"][0]["lam"] == 1e3
