"""grid_lambda.py on a local Ray of 2 CPUs: selection re-checked from the checkpoints, resubmission, multi-worker
trials, refusals, the plan."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest
import ray.train

from jumplora import checkpoints
from jumplora.config import RunConfig
from jumplora.continual import evaluate, prepare
from ray_jobs import grid, worker
from ray_jobs.cli import run_main
from tests.ray.conftest import cli_args

pytestmark = pytest.mark.usefixtures("local_ray")
GRID = [1.0, 1e3, 1e5]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return tmp_path_factory.mktemp("ray-grid")


def grid_args(cache, storage, name: str, tasks: int, lambdas: str, *extra: str) -> list[str]:
    return cli_args(cache, storage, "--order", "1", "--max-tasks", str(tasks), "--grid", lambdas, "--name", name,
                    *extra)


@pytest.fixture(scope="module")
def small_grid(smoke_cache, storage):
    """3 tasks × 3 λ, one process per trial, two trials at a time."""
    assert grid.main(grid_args(smoke_cache, storage, "small", 3, "1,1e3,1e5")) == 0
    return storage / "small"


def dev_mean_of(checkpoint_path: str, ws, base_state) -> float:
    """The mean dev accuracy over the seen tasks of a checkpoint, evaluated here in one process."""
    ws.model.load_state_dict(base_state)
    with ray.train.Checkpoint(checkpoint_path).as_directory() as directory:
        state = checkpoints.load(Path(directory), ws)
    seen = len(state.records)
    return math.fsum(evaluate(ws, ws.tasks[:seen], "dev", progress=False)) / seen


@pytest.mark.timeout(600)
def test_each_stage_selects_the_best_dev_accuracy(small_grid, smoke_cache):
    manifest = json.loads((small_grid / grid.MANIFEST).read_text())
    stages = manifest["stages"]
    assert [s["task"] for s in stages] == [1, 2, 3]
    assert [[t["lam"] for t in s["trials"]] for s in stages[1:]] == [GRID, GRID]
    results = json.loads((small_grid / worker.RUN_DIR / "results.json").read_text())
    ws = prepare(RunConfig(**{**results["config"], "device": "cpu"}), smoke_cache, progress=False)
    ws = dataclasses.replace(ws, tasks=ws.tasks[:3])
    base_state = copy.deepcopy(ws.model.state_dict())
    for stage in stages[1:]:
        ours = {}
        for trial in stage["trials"]:
            lambdas = [s["selected_lam"] for s in stages[: stage["task"] - 1]] + [trial["lam"]]
            ws = dataclasses.replace(ws, lambdas=lambdas)
            ours[trial["lam"]] = dev_mean_of(trial["checkpoint"], ws, base_state)
            assert ours[trial["lam"]] == pytest.approx(trial["dev_mean"], abs=1e-12)
        best = max(ours.values())
        expected = min(lam for lam, value in ours.items() if value >= best - 1e-12)
        assert stage["selected_lam"] == expected
    assert results["lambdas"] == [s["selected_lam"] for s in stages]
    assert results["fwt"] is not None and len(results["single_task_accuracy"]) == 3
    rows = (small_grid / "grid_trials.csv").read_text().splitlines()
    assert len(rows) == 1 + 1 + 2 * len(GRID) and rows[0].startswith("task,task_name,lambda")
    assert "every trial:" in (small_grid / "grid_report.md").read_text()


@pytest.mark.timeout(180)
def test_a_resubmitted_grid_skips_finished_stages(small_grid, smoke_cache, storage):
    trial_dirs = sorted(p.name for p in small_grid.glob("task*/*") if p.is_dir())
    assert grid.main(grid_args(smoke_cache, storage, "small", 3, "1,1e3,1e5")) == 0
    assert sorted(p.name for p in small_grid.glob("task*/*") if p.is_dir()) == trial_dirs


@pytest.mark.timeout(600)
def test_two_worker_trials_drive_a_torch_trainer(small_grid, smoke_cache, storage):
    args = grid_args(smoke_cache, storage, "two-workers", 2, "1e3", "--workers-per-trial", "2",
                     "--cpus-per-worker", "0.9")
    assert grid.main(args) == 0
    two = json.loads((storage / "two-workers" / grid.MANIFEST).read_text())["stages"]
    one = json.loads((small_grid / grid.MANIFEST).read_text())["stages"]
    assert two[0]["trials"][0]["dev_mean"] == pytest.approx(one[0]["trials"][0]["dev_mean"], abs=1 / 16 + 1e-9)
    one_trial = next(t for t in one[1]["trials"] if t["lam"] == 1e3)
    assert two[1]["trials"][0]["dev_mean"] == pytest.approx(one_trial["dev_mean"], abs=1 / 16 + 1e-9)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("extra", "message"), [
    (["--max-concurrent", "3"], "3 concurrent training(s)"),
    (["--gpus-per-worker", "1"], "GPUs"),
    (["--workers-per-trial", "2"], "need 2.01 CPUs"),
    (["--grid", "0,1"], "must be positive"),
])
def test_requests_beyond_the_cluster_or_bad_values_are_refused(smoke_cache, storage, capsys, extra, message):
    args = cli_args(smoke_cache, storage, "--order", "1", "--max-tasks", "2", "--name", "refused", *extra)
    assert run_main(grid.main, args) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error and error.count("\n") == 1
    assert not (storage / "refused").exists()
