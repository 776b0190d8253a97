"""`jumplora run` with MLflow tracking, checked through MlflowClient against the run directory's results.json."""

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
import transformers
from mlflow import MlflowClient

from jumplora import flags, outputs, runtime, tracking
from jumplora.cli import main
from jumplora.config import RunConfig
from jumplora.results import RunResults, StageRecord
from jumplora.tracking import runs
from tests.tracking.conftest import history, runs_of


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_parent_and_task_runs_hold_what_results_json_holds(tracked, tmp_path):
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
        if key == results["method"]:  # its own settings, under its name (an MLflow key writes `+` as `_`)
            own = {f"config.{key.replace('+', '_')}.{name}": str(setting) for name, setting in value.items()}
            assert own.items() <= params.items() and own, key
            continue
        assert f"config.{key}" in params, key
        if key != "lambdas" and not isinstance(value, list | dict):
            assert params[f"config.{key}"] == str(value), key
    assert params["config.seed"] == "42" and params["config.max_train_per_task"] == "65"
    assert json.loads(params["config.lambdas"]) == results["lambdas"]
    assert json.loads(params["tasks"]) == results["tasks"]
    assert params["data_fingerprint"] == results["data_fingerprint"]
    assert "mlflow.source.git.commit" in parent.data.tags and parent.data.tags["versions.torch"] == torch.__version__

    # final metrics and λ per task, to 2 decimals as the view shows them (the whole values: results.json)
    assert parent.data.metrics["OA"] == round(results["oa"], 2)
    assert parent.data.metrics["BWT"] == round(results["bwt"], 2)
    # each with its 95 % interval's bounds (results.json's `intervals`)
    assert [parent.data.metrics["OA_low"], parent.data.metrics["OA_high"]] == [round(v, 2) for v in
                                                                             results["intervals"]["oa"]]
    assert [parent.data.metrics["BWT_low"], parent.data.metrics["BWT_high"]] == [round(v, 2) for v in
                                                                               results["intervals"]["bwt"]]
    assert "FWT" not in parent.data.metrics and "FWT_last_row" not in parent.data.metrics  # no single-task baselines
    assert parent.data.metrics["lambda/02-amazon"] == results["lambdas"][1]
    # the cost: 2 trainings of 3 steps (65 examples at batch 32), their seconds summed, on this process's threads
    cost = results["cost"]
    assert (cost["trainings"], cost["optimizer_steps"], cost["device_unit"]) == (2, 6, "CPU")
    assert cost["wall_seconds"] == pytest.approx(sum(cost["task_seconds"])) and min(cost["task_seconds"]) > 0
    assert cost["device_hours"] == pytest.approx(results["runtime"]["threads"] * cost["wall_seconds"] / 3600)
    assert {key: parent.data.metrics[f"cost/{key}"] for key in ("trainings", "optimizer_steps", "device_hours")} == \
        {"trainings": 2, "optimizer_steps": 6, "device_hours": round(cost["device_hours"], 4)}
    assert parent.data.metrics["cost/wall_hours"] == round(cost["wall_seconds"] / 3600, 4)
    # the accuracy of task 1 after each task, once per task (task 1 was logged before the interruption only), in
    # percent as every accuracy logged (results.json keeps fractions)
    assert history(client, parent.info.run_id, "test_accuracy/01-dbpedia") == \
        [100 * row[0] for row in results["accuracy_matrix"]]

    for t, child in enumerate(sorted(children, key=lambda r: r.info.run_name)):
        metrics = child.data.metrics
        for j, task in enumerate(results["tasks"][: t + 1]):
            assert metrics[f"test_accuracy/{j + 1:02d}-{task}"] == 100 * results["accuracy_matrix"][t][j]
            assert metrics[f"dev_accuracy/{j + 1:02d}-{task}"] == 100 * results["dev_accuracy_matrix"][t][j]
            assert [metrics[f"test_accuracy_low/{j + 1:02d}-{task}"], metrics[f"test_accuracy_high/{j + 1:02d}-{task}"]
                    ] == [100 * bound for bound in results["intervals"]["accuracy_matrix"][t][j]]
            assert [metrics[f"dev_accuracy_low/{j + 1:02d}-{task}"], metrics[f"dev_accuracy_high/{j + 1:02d}-{task}"]
                    ] == [100 * bound for bound in results["intervals"]["dev_accuracy_matrix"][t][j]]
        assert history(client, child.info.run_id, "ce") == results["loss_curves"]["ce"][t]
        assert history(client, child.info.run_id, "lambda_penalty") == results["loss_curves"]["penalty"][t]
        assert metrics["tau/global"] == results["thresholds"][t]["global"]
        assert metrics["sparsity/overall"] == results["sparsity"][t]["overall"]
        assert metrics["sparsity/encoder.block.0"] == results["sparsity"][t]["per_layer"]["encoder.block.0"]
        assert child.data.params["lambda"] == str(results["lambdas"][t])
        # (task 1's child was logged by the interrupted attempt: its seconds are that attempt's)
        assert metrics["optimizer_steps"] == 3 and metrics["seconds"] > 0

    # artifacts: results.json (identical), the CSV, the plots, the merged updates (the merged model is a LoggedModel
    # of its own, not a run artifact: tests/tracking/test_models.py)
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"results.json", "accuracy_matrix.csv", "updates.safetensors", "summary.txt", "accuracy_heatmap.png",
            "sparsity_by_layer.png", "overlap.png", "bwt_radar.png"} <= names and "merged_model" not in names
    downloaded = client.download_artifacts(parent.info.run_id, "results.json", str(tmp_path))
    assert json.loads(Path(downloaded).read_text()) == results

    # `jumplora report` reads the experiment back
    assert main(["report", "jumplora-order1", "--tracking-uri", tracked.uri, "--out", str(tmp_path / "rep")]) == 0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    by_method = {r["method"]: r["oa"] for r in report["runs"]}
    assert by_method == {"jumplora+ella": results["oa"], "inclora": tracked.results(tracked.other_dir)["oa"]}


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_a_run_directory_written_before_flags_were_kept_is_logged_with_one_note(tracked, tmp_path, capsys):
    """The inclora run's results.json as an older jumplora wrote it (no flags, no intervals): `jumplora track` logs
    its numbers without bounds, and says once why."""
    kept = ("test_flags", "dev_flags", "single_task_flags", "single_task_flags_shared", "intervals",
            "test_fingerprints")
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "results.json").write_text(json.dumps({key: value for key, value in tracked.results(tracked.other_dir)
                                                  .items() if key not in kept}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["track", str(old), "--tracking-uri", uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{old}: ") and lines[0].endswith(
        "; no intervals (written before flags were kept)")
    client = MlflowClient(uri)
    [parent] = [r for r in runs_of(client, client.get_experiment_by_name("jumplora-order1").experiment_id)
                if r.data.tags[tracking.KIND_TAG] == "run"]
    assert "OA" in parent.data.metrics and not any(key.endswith(("_low", "_high")) for key in parent.data.metrics)


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_results_json_and_the_parent_run_say_how_the_run_trained(tracked):
    runtime = tracked.results(tracked.main_dir)["runtime"]
    assert {key: runtime[key] for key in ("world_size", "global_batch", "per_worker_batch", "micro_batches",
                                          "device_type", "precision")} == \
        {"world_size": 1, "global_batch": 32, "per_worker_batch": 32, "micro_batches": 1, "device_type": "cpu",
         "precision": "fp32"}
    assert runtime["versions"]["torch"] == torch.__version__
    client = MlflowClient(tracked.uri)
    experiment = client.get_experiment_by_name("jumplora-order1")
    parent = next(r for r in runs_of(client, experiment.experiment_id) if r.info.run_name == tracked.main_dir.name)
    params = parent.data.params
    assert params["runtime.world_size"] == "1" and params["runtime.device_type"] == "cpu"
    assert params["runtime.precision"] == "fp32" and params["runtime.micro_batches"] == "1"
    assert params["runtime.versions.torch"] == torch.__version__
    assert params["runtime.git_commit"] == parent.data.tags["mlflow.source.git.commit"] == git_head()


def git_head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(runs.__file__).parent, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_the_runtime_of_a_data_parallel_run_and_git_read_once(monkeypatch):
    calls = []
    real = runtime.git_commit
    monkeypatch.setattr(runtime, "git_commit", lambda: calls.append(1) or real())
    runtime.provenance.cache_clear()
    config = RunConfig(batch_size=32, micro_batches=2)
    described = runtime.describe_runtime(config, 4, torch.device("cpu"))
    assert {key: value for key, value in described.items() if key not in ("versions", "git_dirty", "device_name")} == \
        {"world_size": 4, "global_batch": 32, "per_worker_batch": 8, "micro_batches": 2, "device_type": "cpu",
         "threads": torch.get_num_threads(), "precision": "fp32", "git_commit": git_head()}
    assert described["versions"]["torch"] == torch.__version__
    assert described["versions"]["transformers"] == transformers.__version__
    runtime.describe_runtime(config, 1, torch.device("cpu"))
    assert tracking.client.version_tags()["versions.torch"] == torch.__version__
    assert len(calls) == 1  # one git call per process, however many runs start


def test_the_end_of_a_run_logs_fwt_and_fwt_last_row():
    """FWT (SPEC) and FWT_last_row (the authors' script, SPEC §4) from results.json, or given by a Ray driver (the
    sweep's a0); both absent without single-task baselines."""
    from types import SimpleNamespace

    results = RunResults(order=1, method="inclora", seed=42, oa=60.0, bwt=-30.0, fwt=-10.0, fwt_last_row=-25.0,
                         tasks=["a"], lambdas=[0.0])
    assert runs.final_metrics(results) == {"OA": 60.0, "LA": None, "BWT": -30.0, "FWT": -10.0, "FWT_last_row": -25.0}
    assert runs.final_metrics(RunResults(order=1, method="inclora", seed=42, oa=60.0, bwt=-30.0)) == \
        {"OA": 60.0, "LA": None, "BWT": -30.0, "FWT": None, "FWT_last_row": None}
    # the learning accuracy: recorded, or for a run written before it was, the mean of the matrix's diagonal
    old = dataclasses.replace(results, accuracy_matrix=[[0.8, None], [0.5, 0.6]])
    assert runs.final_metrics(old)["LA"] == pytest.approx(70.0)
    assert runs.final_metrics(dataclasses.replace(old, la=65.0))["LA"] == 65.0

    logged = []
    tracker = SimpleNamespace(log=lambda run, params=None, metrics=None: logged.append(metrics),
                              artifacts=lambda run, paths: None, finish=lambda run: None)
    log = runs.ContinualLogger(tracker, "name", "key")
    log.run = SimpleNamespace(finished=False)
    log.end(dataclasses.replace(results, fwt=None, fwt_last_row=None), None, fwt=-1.5, fwt_last_row=-2.5)
    assert logged[-1]["FWT"] == -1.5 and logged[-1]["FWT_last_row"] == -2.5


def test_the_final_metrics_are_logged_as_the_view_shows_them():
    """MLflow's runs table shows a metric's whole float: the points to 2 decimals, the hours to 4 (31 s: 0.0086 h), a
    count as it is; the whole values stay in results.json."""
    results = RunResults(order=1, method="inclora", seed=42, oa=200 / 3, bwt=-28 / 3, la=75.0, tasks=["a"],
                         lambdas=[0.0], intervals={"oa": [58.94321, 72.12567], "bwt": [-20.005001, 0.0]},
                         cost={"trainings": 3, "optimizer_steps": 1234567, "wall_seconds": 31.0,
                               "device_hours": 2 * 31.0 / 3600, "device_unit": "CPU"})
    assert runs.final_metrics(results, fwt=-1.2345) == {
        "OA": 66.67, "LA": 75.0, "BWT": -9.33, "FWT": -1.23, "FWT_last_row": None, "OA_low": 58.94, "OA_high": 72.13,
        "BWT_low": -20.01, "BWT_high": 0.0, "cost/trainings": 3, "cost/optimizer_steps": 1234567,
        "cost/wall_hours": 0.0086, "cost/device_hours": 0.0172}


class Recorder:
    """A tracker that keeps what it is given, by run name: metrics, curves as lists, a step metric as the list of its
    values in the order logged."""

    def __init__(self) -> None:
        self.logged: dict[str, dict] = {}

    def __bool__(self) -> bool:
        return True

    def start(self, experiment, name, key, kind, parent=None, tags=None, replace=False, reopen=False):
        self.logged[name] = {}
        return tracking.Run(key, name, "0", experiment)

    def log(self, run, params=None, metrics=None, curves=None, steps=None, tags=None):
        logged = self.logged[run.name]
        logged.update({key: value for key, value in (metrics or {}).items() if value is not None})
        logged.update({key: list(values) for key, values in (curves or {}).items()})
        for key, (_, value) in (steps or {}).items():
            logged.setdefault(key, []).append(value)

    def steps(self, run, key):
        return set()

    def artifacts(self, run, paths, artifact_path=None):
        pass

    def finish(self, run, status="FINISHED"):
        pass


# what names an accuracy among the metrics (a cell, its bounds, a mean over tasks, a λ trial's, an a0, OA / BWT)
ACCURACY = re.compile(r"accuracy|_mean|dev_past|dev_current|rung_dev|^a0/|^OA|^BWT")


def accuracies(logged: dict) -> dict:
    return {key: value for key, value in logged.items() if ACCURACY.search(key)}


def test_every_accuracy_a_run_or_a_grid_logs_is_in_percent(tmp_path, monkeypatch):
    """A two-task run (cells of 4 test and 4 dev examples) and a grid's first stage, logged as the run itself and the
    grid's driver log them: every accuracy in percent, as OA and BWT are; the counts as they are. The Wilson bounds
    of k right of 4, by hand: k = 1 [4.56, 69.94], 2 [15.00, 85.00], 3 [30.06, 95.44]."""
    from jumplora import guidance
    from jumplora.storage import Storage
    from jumplora.tracking import folders

    def cell(right):
        return flags.pack([True] * right + [False] * (4 - right))

    results = RunResults(
        order=1, method="inclora", seed=42, tasks=["a", "b"], config={"order": 1, "method": "inclora"},
        accuracy_matrix=[[0.5, None], [0.25, 0.75]], dev_accuracy_matrix=[[0.75, None], [0.5, 0.25]],
        test_flags=[[cell(2)], [cell(1), cell(3)]], dev_flags=[[cell(3)], [cell(2), cell(1)]], oa=50.0, bwt=-25.0,
        lambdas=[0.0, 0.0], loss_curves={"ce": [[1.0], [1.0]], "penalty": [[0.0], [0.0]]},
        thresholds=[{}, {}], sparsity=[{"overall": 0.0, "per_layer": {}}] * 2)
    recorder = Recorder()
    runs.log_completed_run(recorder, results, None, "run", "key")
    bounds = {1: (4.56, 69.94), 2: (15.0, 85.0), 3: (30.06, 95.44)}

    def cell_bounds(split, name, right):
        low, high = bounds[right]
        return {f"{split}_accuracy_low/{name}": pytest.approx(low, abs=0.005),
                f"{split}_accuracy_high/{name}": pytest.approx(high, abs=0.005)}

    assert accuracies(recorder.logged["run"]) == {
        "OA": 50.0, "BWT": -25.0, "test_accuracy/01-a": [50.0, 25.0], "test_accuracy/02-b": [75.0],
        "seen_test_mean": [50.0, 50.0], "seen_dev_mean": [75.0, 37.5]}
    assert accuracies(recorder.logged["task02-b"]) == {
        "test_accuracy/01-a": 25.0, "test_accuracy/02-b": 75.0, "dev_accuracy/01-a": 50.0, "dev_accuracy/02-b": 25.0,
        "seen_test_mean": 50.0, "seen_dev_mean": 37.5, **cell_bounds("test", "01-a", 1),
        **cell_bounds("test", "02-b", 3), **cell_bounds("dev", "01-a", 2), **cell_bounds("dev", "02-b", 1)}

    stage = StageRecord.from_json({
        "task": 1, "task_name": "a", "selected_lam": 0.0, "baselines": [{"task": 2, "a0": 0.5}],
        "trials": [{"lam": 0.0, "dev_mean": 0.4, "dev_current": 0.4, "test_mean": 0.3, "steps": 3, "selected": True},
                   {"lam": 1.0, "dev_mean": None, "steps": 1, "rung_dev": [0.25], "cut_at_step": 1,
                    "rung_dev_mean": 0.25, "rung_dev_current": 0.25}]})
    monkeypatch.setattr(guidance, "lambda_plotted", lambda record: False)  # no plot: not what is checked here
    grid = Recorder()
    folders.GridLog(grid, "grid", Storage(str(tmp_path)), {"order": 1}, ["a", "b"], [[0.0, 1.0]]).stage(stage)
    assert accuracies(grid.logged["grid"]) == {"a0/02": 50.0}
    assert grid.logged["task01-a-lam0"] == {"dev_mean": 40.0, "dev_current": 40.0, "test_mean": 30.0, "steps": 3,
                                            "selected": 1.0}
    assert grid.logged["task01-a-lam1"] == {"rung_dev": [25.0], "rung_dev_mean": 25.0, "rung_dev_current": 25.0,
                                            "steps": 1, "cut_at_step": 1, "selected": 0.0}


def test_the_results_json_of_a_real_run_reads_back_whole(tracked):
    """`RunResults` of a tiny run's results.json (`tracked`): its keys, in the order written, and back to the same
    bytes."""
    text = (tracked.main_dir / outputs.RESULTS).read_text()
    results = RunResults.from_json(json.loads(text))
    assert list(json.loads(text)) == [
        "schema", "order", "tasks", "method", "config", "seed", "data_fingerprint", "accuracy_matrix",
        "dev_accuracy_matrix", "single_task_accuracy", "single_task_accuracy_shared", "unlabelled_test",
        "majority_baseline", "oa", "la", "bwt", "fwt", "fwt_last_row", "intervals", "sparsity", "jaccard",
        "thresholds", "lambdas", "loss_curves", "runtime", "cost", "test_flags", "dev_flags", "single_task_flags",
        "single_task_flags_shared", "test_fingerprints"]
    assert json.dumps(results.to_json(), indent=1) == text
    assert RunResults.from_json(results.to_json()) == results
    assert (results.schema, results.method, len(results.tasks), results.runtime["world_size"]) == \
        (1, "jumplora+ella", 2, 1)
