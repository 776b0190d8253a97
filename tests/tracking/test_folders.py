"""The Ray drivers' tracking (`jumplora/tracking/folders.py`) on storage folders laid out as the jobs leave them,
without Ray: a grid's parent / task / (task, λ) trial runs, a sweep's per-order parent, and no duplicates when logged
again; `jumplora track` on a grid folder."""

import shutil
from types import SimpleNamespace

from mlflow import MlflowClient
from mlflow.entities import ViewType

from jumplora import tracking
from jumplora.results import StageRecord
from jumplora.storage import Storage
from jumplora.tracking import folders


def copy_run(source, folder):
    """A run directory published by a worker: every file `write_run` wrote (not the merged model)."""
    (folder / "run").mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copy(path, folder / "run" / path.name)


def test_grid_and_sweep_logging_reattaches(tracked, tmp_path):
    results = tracked.results(tracked.main_dir)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)

    grid_folder = tmp_path / "grid"
    copy_run(tracked.main_dir, grid_folder)
    (grid_folder / "grid_trials.csv").write_text("task,lambda\n")
    records = [StageRecord.from_json(record) for record in [
        {"task": 1, "task_name": results["tasks"][0], "selected_lam": 0.0, "baselines": [{"task": 2, "a0": 0.5}],
         "trials": [{"lam": 0.0, "dev_mean": 0.4, "test_mean": 0.3, "selected": True}]},
        {"task": 2, "task_name": results["tasks"][1], "selected_lam": 10.0, "baselines": [],
         "trials": [{"lam": lam, "dev_mean": dev, "test_mean": 0.25 if lam == 10.0 else None, "selected": lam == 10.0}
                    for lam, dev in [(1.0, 0.2), (10.0, 0.3), (100.0, 0.1)]]},  # a lean grid tests the chosen only
    ]]
    for _ in range(2):  # a resubmitted grid logs everything again: nothing is duplicated
        log = folders.GridLog(tracking.Tracker(uri), "grid-demo", Storage(str(grid_folder)), results["config"],
                            results["tasks"], [[0.0], [1.0, 10.0, 100.0]])
        log.stage(records[0])
        log.end(records)
    experiment = client.get_experiment_by_name("jumplora-order1")
    runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
    by_kind = {}
    for run in runs:
        by_kind.setdefault(run.data.tags[tracking.KIND_TAG], []).append(run)
    assert sorted(by_kind) == ["grid", "task", "trial"] and len(by_kind["grid"]) == 1
    grid = by_kind["grid"][0]
    assert sorted(r.info.run_name for r in by_kind["task"]) == ["task01-dbpedia", "task02-amazon"]
    assert sorted(r.info.run_name for r in by_kind["trial"]) == [
        "task01-dbpedia-lam0", "task02-amazon-lam1", "task02-amazon-lam10", "task02-amazon-lam100"]
    task2 = next(r for r in by_kind["task"] if r.info.run_name == "task02-amazon")
    trials2 = [r for r in by_kind["trial"] if r.data.tags[tracking.PARENT_TAG] == task2.info.run_id]
    assert {r.data.tags["selected"] for r in trials2} == {"true", "false"} and len(trials2) == 3
    assert {r.data.tags["selected"]: r.data.metrics.get("test_mean") for r in trials2} == {"true": 25.0, "false": None}
    assert task2.data.metrics["chosen_lambda"] == 10.0
    assert task2.data.metrics["test_accuracy/02-amazon"] == 100 * results["accuracy_matrix"][1][1]  # in percent
    assert grid.data.metrics["OA"] == round(results["oa"], 2) and grid.data.metrics["a0/02"] == 50.0
    assert [m.value for m in client.get_metric_history(grid.info.run_id, "chosen_lambda")] == [0.0, 10.0]
    artifacts = {a.path for a in client.list_artifacts(grid.info.run_id)}
    assert {"results.json", "grid_lambdas.png", "grid_trials.csv", "accuracy_heatmap.png"} <= artifacts
    assert {r.info.status for r in runs} == {"FINISHED"}

    sweep_folder = tmp_path / "sweep"
    run_id = "jumplora+ella-order1-seed42"
    copy_run(tracked.main_dir, sweep_folder / "runs" / run_id)
    (sweep_folder / "tables.md").write_text("| method |\n")
    sweep = SimpleNamespace(benchmark="sc", methods=["jumplora+ella"], seeds=[42], orders=[1],
                            runs=[SimpleNamespace(id=run_id, job=SimpleNamespace(run=SimpleNamespace(
                                order=1, method="jumplora+ella", seed=42)))])  # a `ray_jobs.jobs.Trial`
    values = {("jumplora+ella", 1, 42): {"oa": results["oa"], "bwt": results["bwt"], "fwt": -1.5,
                                         "fwt_last_row": -2.5}}
    for _ in range(2):
        folders.log_sweep(tracking.Tracker(uri), "reproduce-demo", sweep, Storage(str(sweep_folder)), values)
    runs = [r for r in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
            if r.data.tags[tracking.KIND_TAG] in ("sweep", "run")]
    sweep_run = next(r for r in runs if r.data.tags[tracking.KIND_TAG] == "sweep")
    member = next(r for r in runs if r.data.tags[tracking.KIND_TAG] == "run")
    assert len(runs) == 2 and member.data.tags[tracking.PARENT_TAG] == sweep_run.info.run_id
    assert member.info.run_name == run_id and member.data.metrics["FWT"] == -1.5
    assert member.data.metrics["FWT_last_row"] == -2.5
    assert {"tables.md", "bwt_radar_order1.png"} <= {a.path for a in client.list_artifacts(sweep_run.info.run_id)}


def test_jumplora_track_logs_a_grid_folder_afterwards_and_marks_an_abandoned_one_killed(tracked, tmp_path, capsys):
    """A grid whose driver could not log: `jumplora track` logs it as `GridLog` would have (parent, a task run per
    stage, a trial run per λ, the tables); again, nothing is added. Without `run/` (its driver died), the finished
    stages are logged and the grid's runs left RUNNING are marked KILLED."""
    import json

    from jumplora.cli import main

    results = tracked.results(tracked.main_dir)
    records = [
        {"task": 1, "task_name": results["tasks"][0], "selected_lam": 0.0, "baselines": [],
         "trials": [{"lam": 0.0, "dev_mean": 0.4, "test_mean": 0.3, "selected": True}]},
        {"task": 2, "task_name": results["tasks"][1], "selected_lam": 10.0, "baselines": [],
         "trials": [{"lam": lam, "dev_mean": 0.1 * lam ** 0.5, "test_mean": None, "selected": lam == 10.0}
                    for lam in (1.0, 10.0)]},
    ]
    # the layout `grid.run_grid` writes: the job's identity holds the λ tried per stage
    manifest = {"job": {"run": {**results["config"], "max_tasks": 2}, "lambdas_tried": [[0.0], [1.0, 10.0]]},
                "stages": records}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)

    finished, abandoned = tmp_path / "grid", tmp_path / "abandoned"
    copy_run(tracked.main_dir, finished)
    for folder, stages in ((finished, records), (abandoned, records[:1])):
        folder.mkdir(exist_ok=True)
        (folder / "manifest.json").write_text(json.dumps({**manifest, "stages": stages}))
    (finished / "grid_trials.csv").write_text("task,lambda\n")

    def grid_family(name):
        experiment = client.get_experiment_by_name("jumplora-order1")
        runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
        parent = next(r for r in runs if r.info.run_name == name)
        family, todo = [], [parent]
        while todo:
            run = todo.pop()
            family.append((run.data.tags[tracking.KIND_TAG], run.info.run_name, run.info.status))
            todo += [r for r in runs if r.data.tags.get(tracking.PARENT_TAG) == run.info.run_id]
        return sorted(family)

    for said in ("logged", "nothing new (the store already holds all of it)"):
        assert main(["track", str(finished), str(abandoned), "--tracking-uri", uri]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"{finished}: {said}"
        assert lines[1].startswith(f"{abandoned}: not finished and its driver is gone: what it finished is logged")
        assert grid_family("grid") == sorted(
            [("grid", "grid", "FINISHED"), ("task", "task01-dbpedia", "FINISHED"),
             ("task", "task02-amazon", "FINISHED"), ("trial", "task01-dbpedia-lam0", "FINISHED"),
             ("trial", "task02-amazon-lam1", "FINISHED"), ("trial", "task02-amazon-lam10", "FINISHED")])
        assert grid_family("abandoned") == sorted(
            [("grid", "abandoned", "KILLED"), ("task", "task01-dbpedia", "KILLED"),
             ("trial", "task01-dbpedia-lam0", "FINISHED")])
    grid = next(r for r in client.search_runs([client.get_experiment_by_name("jumplora-order1").experiment_id])
                if r.info.run_name == "grid")
    assert grid.data.metrics["OA"] == round(results["oa"], 2)  # as the view shows it
    assert {"grid_trials.csv", "manifest.json", "grid_lambdas.png", "results.json"} <= \
        {a.path for a in client.list_artifacts(grid.info.run_id)}
