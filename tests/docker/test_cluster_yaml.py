"""docker/cluster.yaml (`ray up`) and docker/rayjob.yaml (KubeRay): they parse, use the image, mount the shared
storage that --storage-path points into, start the order-4 grid and pass the MLflow tracking URI."""

import pytest
import yaml

from tests.docker.conftest import ROOT

CLUSTER = (ROOT / "docker" / "cluster.yaml").read_text(encoding="utf-8")
RAYJOB = (ROOT / "docker" / "rayjob.yaml").read_text(encoding="utf-8")


def test_cluster_yaml_is_valid_for_ray_up(checks):
    # includes Ray's own schema validation (ray.autoscaler's prepare_config + validate_config)
    assert checks.check_cluster_yaml(CLUSTER) == []
    config = yaml.safe_load(CLUSTER)
    assert config["docker"]["image"].endswith("/jumplora:0.1.0")
    assert "ray_jobs/grid_lambda.py --order 4" in " ".join(config["head_start_ray_commands"])


def test_rayjob_yaml_is_a_kuberay_rayjob(checks):
    assert checks.check_rayjob_yaml(RAYJOB) == []
    job = yaml.safe_load(RAYJOB)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert "ray_jobs/grid_lambda.py --order 4" in job["spec"]["entrypoint"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("registry.example.com/jumplora:0.1.0", "registry.example.com/jumplora:latest", "not REGISTRY/jumplora"),
        ("grid_lambda.py --order 4", "grid_lambda.py --order 1", "does not start"),
        ("--storage-path /mnt/shared/ray_results", "--storage-path /tmp/ray_results", "not on a mounted shared"),
        ("- --volume /mnt/shared:/mnt/shared\n", "", "not on a mounted shared"),
        ("--env MLFLOW_TRACKING_URI=", "--env MLFLOW_URI=", "MLFLOW_TRACKING_URI"),
        ("idle_timeout_minutes: 30", "idle_timeout_minutes: 30\nmin_nodes: 2", "Ray rejects cluster.yaml"),
        ("cluster_name: jumplora", "cluster_name: [jumplora", "does not parse"),
    ],
)
def test_cluster_yaml_problems_are_reported(checks, old, new, message):
    assert old in CLUSTER
    problems = checks.check_cluster_yaml(CLUSTER.replace(old, new))
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("registry.example.com/jumplora:0.1.0   # EDIT the registry\n              imagePullPolicy",
         "rayproject/ray:2.60.0-gpu\n              imagePullPolicy", "not REGISTRY/jumplora"),
        ("grid_lambda.py --order 4 --storage", "grid_lambda.py --order 3 --storage", "does not start"),
        ("--storage-path /mnt/shared/ray_results", "--storage-path /home/jumplora/results", "not on a mounted shared"),
        ("- name: MLFLOW_TRACKING_URI", "- name: MLFLOW_URI", "head container 'ray-head' has no MLFLOW_TRACKING_URI"),
        ('rayVersion: "2.60.0"', 'rayVersion: "2.59.0"', "rayVersion"),
        ("kind: RayJob", "kind: RayCluster", "0 RayJob documents"),
        ("claimName: jumplora-shared\n    workerGroupSpecs", "claimName: other\n    workerGroupSpecs",
         "not on a mounted shared"),
    ],
)
def test_rayjob_yaml_problems_are_reported(checks, old, new, message):
    assert old in RAYJOB
    problems = checks.check_rayjob_yaml(RAYJOB.replace(old, new, 1))
    assert any(message in p for p in problems), problems
