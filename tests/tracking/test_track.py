"""`jumplora track`: a run whose MLflow server died during the run is logged afterwards as an uninterrupted tracked
run is (every param, metric and artifact, compared with the session's inclora run of the same configuration; its
merged model logged and registered as the run asked), and logging it again adds nothing."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess

import pytest
from mlflow import MlflowClient

import jumplora.continual
from jumplora import tracking
from jumplora.cli import main
from jumplora.tracking import models
from tests.conftest import console_script
from tests.tracking.conftest import N_TASKS, OTHER_MODEL, REGISTERED, run_args, runs_of, serving


def artifact_files(client, run_id: str, path: str | None = None) -> list[tuple[str, int | None]]:
    files = []
    for entry in client.list_artifacts(run_id, path):
        files += artifact_files(client, run_id, entry.path) if entry.is_dir else [(entry.path, entry.file_size)]
    return files


# what a run measured of its own time (`jumplora.cost`): two runs of one configuration differ there, so a snapshot
# keeps those metrics' steps, not their values, and results.json's name, not its size
TIMED_METRICS, TIMED_FILES = {"cost/wall_hours", "cost/device_hours", "seconds"}, {"results.json"}


def untimed(key: str, history: list) -> list:
    return sorted((m.step, None if key in TIMED_METRICS else m.value) for m in history)


def snapshot(client, name: str) -> dict:
    """What the store holds of the run `name` of order 1: its parent and children, each with its status, params,
    metric histories (step, value; `TIMED_METRICS` without values), kind and version tags and artifacts (`TIMED_FILES`
    without sizes); and how many runs the experiment has."""
    experiment = client.get_experiment_by_name("jumplora-order1")
    runs = runs_of(client, experiment.experiment_id)
    parent = next(r for r in runs if r.info.run_name == name and r.data.tags[tracking.KIND_TAG] == "run")
    family = [parent] + [r for r in runs if r.data.tags.get(tracking.PARENT_TAG) == parent.info.run_id]
    return {"runs in the experiment": len(runs), **{run.info.run_name: {
        "status": run.info.status,
        "params": run.data.params,
        "metrics": {key: untimed(key, client.get_metric_history(run.info.run_id, key)) for key in run.data.metrics},
        "tags": {k: v for k, v in run.data.tags.items() if k == tracking.KIND_TAG or k.startswith("versions.")},
        "artifacts": [(path, None if path.rsplit("/", 1)[-1] in TIMED_FILES else size)
                      for path, size in artifact_files(client, run.info.run_id)],
    } for run in family}}


@pytest.mark.timeout(900)
def test_a_run_whose_server_died_is_logged_afterwards_as_an_uninterrupted_run(tracked, tiny_cache, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the dead server: no retries with back-off to wait
    store, artifacts, log = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path / "server.log"
    out = tmp_path / "runs" / tracked.other_dir.name  # the session's uninterrupted inclora run, same configuration
    prepare, run_task = jumplora.continual.prepare, jumplora.continual.loop.run_task

    def first_tasks(*args, **kwargs):  # as the session's tracked runs: the order's first tasks, config unchanged
        ws = prepare(*args, **kwargs)
        return dataclasses.replace(ws, tasks=ws.tasks[:N_TASKS], lambdas=ws.lambdas[:N_TASKS])

    with serving(store, artifacts, log) as (first_url, server):
        def server_dies_before_task_2(ws, state, t, *rest):
            if t == 1:  # task 1 is logged: kill the server's whole process group
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            run_task(ws, state, t, *rest)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(jumplora.continual, "prepare", first_tasks)
            patch.setattr(jumplora.continual.loop, "run_task", server_dies_before_task_2)
            code = main(run_args(out, tiny_cache, first_url, "--method", "inclora", *OTHER_MODEL))
    captured = capsys.readouterr()
    assert code == 0 and (out / "results.json").exists()
    assert [line for line in captured.err.splitlines() if "MLflow" in line][0].startswith(
        f"warning: MLflow tracking at {first_url} failed")
    assert (f"MLflow logging failed (see the warning above): `jumplora track {out} --tracking-uri {first_url}` logs "
            "this run once the store answers") in captured.out.splitlines()

    with serving(store, artifacts, log) as (url, _):
        client = MlflowClient(url)
        before = snapshot(client, out.name)
        assert before[out.name]["status"] == "RUNNING" and "task02-amazon" not in before
        assert main(["track", str(out), "--tracking-uri", url]) == 0
        # the registration the run asked for, said where it went (its name, version and store), then the run
        assert capsys.readouterr().out.splitlines() == [
            f"registered the model as '{REGISTERED}' version 1 (models:/{REGISTERED}/1) in the MLflow store {url}",
            f"{out}: logged"]
        logged = snapshot(client, out.name)
        assert main(["track", str(out), "--tracking-uri", url]) == 0  # again: nothing is added
        assert snapshot(client, out.name) == logged
        # the merged model: logged once, and registered once as the run asked (the first version of the name)
        [version] = client.search_model_versions(f"name = '{REGISTERED}'")
        experiment = client.get_experiment_by_name("jumplora-order1").experiment_id
        assert [m.model_id for m in client.search_logged_models([experiment])] == [models.version_model_id(version)]
        assert int(version.version) == 1 and version.tags["jumplora.method"] == "inclora"
    reference = snapshot(MlflowClient(tracked.uri), tracked.other_dir.name)
    assert logged[out.name] == reference[out.name]
    assert {name: runs for name, runs in logged.items() if name.startswith("task")} == \
        {name: runs for name, runs in reference.items() if name.startswith("task")}
    assert logged["runs in the experiment"] == 1 + N_TASKS


def test_the_installed_command_logs_a_grid_folder_from_outside_the_repository(tracked, tmp_path, installed_env):
    """`jumplora track GRID_FOLDER` through the console script, in a folder outside the repository (it imports
    `ray_jobs` from the install); logged again, it says so."""
    results = tracked.results(tracked.main_dir)
    grid = tmp_path / "grid-demo"
    (grid / "run").mkdir(parents=True)
    for path in tracked.main_dir.iterdir():  # the run directory the grid published (`Storage.publish_run`)
        if path.is_file():
            shutil.copy(path, grid / "run" / path.name)
    stages = [{"task": t + 1, "task_name": task, "selected_lam": 0.0, "baselines": [],
               "trials": [{"lam": 0.0, "dev_mean": 0.5, "test_mean": 0.5, "selected": True}]}
              for t, task in enumerate(results["tasks"])]
    (grid / "manifest.json").write_text(json.dumps({"job": {"run": results["config"], "lambdas_tried": [[0.0]] * 2},
                                                    "stages": stages}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def track(*argv: str) -> list[str]:
        done = subprocess.run([console_script(), "track", *argv, "--tracking-uri", uri], cwd=tmp_path,
                              env=installed_env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()

    assert track("grid-demo") == [f"{grid}: logged"]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("jumplora-order1")
    grid_runs = [r for r in runs_of(client, experiment.experiment_id) if r.data.tags[tracking.KIND_TAG] == "grid"]
    assert len(grid_runs) == 1 and grid_runs[0].data.metrics["OA"] == round(results["oa"], 2)
    assert track(str(grid)) == [f"{grid}: nothing new (the store already holds all of it)"]
