"""`jumplora run` with MLflow tracking, checked through MlflowClient against the run directory's results.json."""

import json
import os
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import ViewType
from transformers import T5ForConditionalGeneration

from jumplora import tracking
from jumplora.cli import main
from tests.tracking.conftest import CAPS


def runs_of(client, experiment_id):
    return client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000)


def history(client, run_id, key):
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_parent_and_task_runs_hold_what_results_json_holds(tracked, tmp_path, capsys):
    assert tracked.interrupted_code == 130
    client = MlflowClient(tracked.uri)
    experiment = client.get_experiment_by_name("jumplora-order1")
    runs = runs_of(client, experiment.experiment_id)
    results = tracked.results(tracked.main_dir)

    # one parent per run directory, one child per task: the resume reattached instead of duplicating
    parents = [r for r in runs if r.data.tags[tracking.KIND_TAG] == "run"]
    assert sorted(r.info.run_name for r in parents) == sorted([tracked.main_dir.name, tracked.other_dir.name])
    parent = next(r for r in parents if r.info.run_name == tracked.main_dir.name)
    children = [r for r in runs if r.data.tags.get(tracking.PARENT_TAG) == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == ["task01-dbpedia", "task02-amazon"]
    assert len(runs) == 2 + 2 * len(results["tasks"])
    assert {r.info.status for r in runs} == {"FINISHED"}

    # params: every config value, flat
    params = parent.data.params
    for key, value in results["config"].items():
        assert f"config.{key}" in params, key
        if key != "lambdas" and not isinstance(value, list | dict):
            assert params[f"config.{key}"] == str(value), key
    assert params["config.seed"] == "42" and params["config.max_train_per_task"] == "65"
    assert json.loads(params["config.lambdas"]) == results["lambdas"]
    assert json.loads(params["tasks"]) == results["tasks"]
    assert params["data_fingerprint"] == results["data_fingerprint"]
    assert "mlflow.source.git.commit" in parent.data.tags and parent.data.tags["versions.torch"] == torch.__version__

    # final metrics and λ per task
    assert parent.data.metrics["OA"] == results["oa"] and parent.data.metrics["BWT"] == results["bwt"]
    assert "FWT" not in parent.data.metrics  # no single-task baselines in this run
    assert parent.data.metrics["lambda/02-amazon"] == results["lambdas"][1]
    # the accuracy of task 1 after each task, once per task (task 1 was logged before the interruption only)
    assert history(client, parent.info.run_id, "test_accuracy/01-dbpedia") == \
        [row[0] for row in results["accuracy_matrix"]]

    for t, child in enumerate(sorted(children, key=lambda r: r.info.run_name)):
        metrics = child.data.metrics
        for j, task in enumerate(results["tasks"][: t + 1]):
            assert metrics[f"test_accuracy/{j + 1:02d}-{task}"] == results["accuracy_matrix"][t][j]
            assert metrics[f"dev_accuracy/{j + 1:02d}-{task}"] == results["dev_accuracy_matrix"][t][j]
        assert history(client, child.info.run_id, "ce") == results["loss_curves"]["ce"][t]
        assert history(client, child.info.run_id, "lambda_penalty") == results["loss_curves"]["penalty"][t]
        assert metrics["tau/global"] == results["thresholds"][t]["global"]
        assert metrics["sparsity/overall"] == results["sparsity"][t]["overall"]
        assert metrics["sparsity/encoder.block.0"] == results["sparsity"][t]["per_layer"]["encoder.block.0"]
        assert child.data.params["lambda"] == str(results["lambdas"][t])

    # artifacts: results.json (identical), the CSV, the plots, the merged updates, the merged model
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"results.json", "accuracy_matrix.csv", "updates.safetensors", "summary.txt", "accuracy_heatmap.png",
            "sparsity_by_layer.png", "overlap.png", "bwt_radar.png", "merged_model"} <= names
    downloaded = client.download_artifacts(parent.info.run_id, "results.json", str(tmp_path))
    assert json.loads(Path(downloaded).read_text()) == results
    model_dir = client.download_artifacts(parent.info.run_id, "merged_model", str(tmp_path))
    loaded = T5ForConditionalGeneration.from_pretrained(model_dir).state_dict()
    local = T5ForConditionalGeneration.from_pretrained(tracked.main_dir / "merged_model").state_dict()
    assert loaded.keys() == local.keys() and all(torch.equal(loaded[k], local[k]) for k in local)
    capsys.readouterr()
    assert main(["eval", model_dir, "--order", "1", "--quiet", "--json", *CAPS]) == 0
    scores = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [scores[t] for t in results["tasks"]] == results["accuracy_matrix"][-1]

    # `jumplora report` reads the experiment back
    assert main(["report", "jumplora-order1", "--tracking-uri", tracked.uri, "--out", str(tmp_path / "rep")]) == 0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    by_method = {r["method"]: r["oa"] for r in report["runs"]}
    assert by_method == {"jumplora+ella": results["oa"], "inclora": tracked.results(tracked.other_dir)["oa"]}


def test_a_dead_server_costs_one_warning_line_and_nothing_else(tracked, capsys):
    results = tracked.results(tracked.main_dir)
    tracker = tracking.Tracker("http://127.0.0.1:9")  # nothing listens on port 9
    assert tracking.log_completed_run(tracker, results, tracked.main_dir, "x", "k") is None
    tracking.log_completed_run(tracker, results, tracked.main_dir, "y", "k2")
    assert not tracker.enabled
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: MLflow tracking at http://127.0.0.1:9 failed")


def test_store_inside_a_ray_job_working_dir_is_warned(tmp_path, monkeypatch, capsys):
    workdir = tmp_path / "job"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.delenv(tracking.URI_ENV, raising=False)
    assert tracking.resolve_uri() == f"sqlite:///{workdir / 'runs' / 'mlflow.db'}"
    assert capsys.readouterr().err == ""  # not a job: no warning
    monkeypatch.setenv(tracking.RAY_JOB_ENV, json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip"}}))
    tracking.resolve_uri()
    assert "temporary working directory" in capsys.readouterr().err
    outside = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert tracking.resolve_uri(outside) == outside and capsys.readouterr().err == ""
    monkeypatch.setenv(tracking.URI_ENV, "http://127.0.0.1:5000")
    assert tracking.resolve_uri() == "http://127.0.0.1:5000"
    assert tracking.resolve_uri("sqlite:////x/y.db") == "sqlite:////x/y.db"
    assert os.environ[tracking.URI_ENV] == "http://127.0.0.1:5000"


def test_resume_reattaches_and_overwrite_replaces(tracked, tmp_path):
    """Logging the same run again reattaches (no new runs, no repeated metric values); `replace` (`--overwrite`)
    deletes the old parent and children and starts one fresh parent under the same key."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = tracking.Tracker(uri)
    results = tracked.results(tracked.other_dir)
    first = tracking.log_completed_run(tracker, results, None, "r", "key")
    again = tracking.log_completed_run(tracker, results, None, "r", "key")
    assert again.run_id == first.run_id
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("jumplora-order1").experiment_id
    assert len(runs_of(client, experiment_id)) == 1 + len(results["tasks"])
    assert len(client.get_metric_history(first.run_id, "seen_test_mean")) == len(results["tasks"])
    fresh = tracker.start("jumplora-order1", "r", "key", "run", replace=True)
    assert fresh.run_id != first.run_id and not fresh.finished
    assert [r.info.run_id for r in runs_of(client, experiment_id)] == [fresh.run_id]
