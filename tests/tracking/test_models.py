"""The merged model as an MLflow model: the session's two tracked runs registered it as versions 1 and 2 of `demo`
(LoggedModels linked to their runs, with the run's metrics and tags), loaded back by MLflow's transformers and pyfunc
flavors and by `jumplora eval` from its URIs, with the run's own test accuracies (the causal preset's: in
tests/test_continual.py, on its causal run); a plain file store logs the model and says in one line that it cannot
register it."""

import json

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from jumplora import tracking
from jumplora.cli import main
from jumplora.data import load_benchmark
from jumplora.data.encode import normalise_answer, prompt_source
from jumplora.runtime import provenance
from jumplora.tracking import models
from tests.tracking.conftest import CAPS, REGISTERED

EVAL_CAPS = {"max_train_per_task": 65, "max_eval_per_task": 16}  # = CAPS


def parent_run(client, run_dir):
    experiment = client.get_experiment_by_name("jumplora-order1")
    return next(r for r in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
                if r.info.run_name == run_dir.name and r.data.tags[tracking.KIND_TAG] == "run")


def evaluated(capsys, source: str, uri: str) -> dict[str, float]:
    capsys.readouterr()
    assert main(["eval", source, "--order", "1", "--quiet", "--json", "--tracking-uri", uri, *CAPS]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def predicted_accuracy(uri: str, model_uri: str, results) -> float:
    """Task 1's test prompts (as the run built them) through the pyfunc flavor: the exact-match rate of its answers
    (normalised generated labels) against the test labels."""
    task = results.tasks[0]
    data = load_benchmark(None, seed=results.config["seed"], tasks=[task], **EVAL_CAPS).tasks[task]
    with models._store(uri):
        predicted = mlflow.pyfunc.load_model(model_uri).predict([prompt_source(data.spec, e.text) for e in data.test])
    assert len(predicted) == len(data.test) and all(isinstance(answer, str) for answer in predicted)
    right = [answer == normalise_answer(e.label) for answer, e in zip(predicted, data.test, strict=True)]
    return sum(right) / len(right)


@pytest.mark.timeout(900)
def test_the_runs_merged_models_are_registered_versions_that_load_with_the_runs_accuracies(tracked, capsys):
    client = MlflowClient(tracked.uri)
    versions = sorted(client.search_model_versions(f"name = '{REGISTERED}'"), key=lambda v: int(v.version))
    assert [int(v.version) for v in versions] == [1, 2]
    commit = provenance()["git_commit"]
    for version, run_dir in zip(versions, (tracked.main_dir, tracked.other_dir), strict=True):
        results = tracked.run_results(run_dir)
        tags = {"jumplora.order": "1", "jumplora.method": results.config["method"], "jumplora.seed": "42",
                "jumplora.lambdas": json.dumps(results.lambdas), "jumplora.tasks": json.dumps(results.tasks),
                "jumplora.run_key": tracking.run_key(run_dir, results.config)}
        assert tags.items() <= version.tags.items()
        assert version.tags["jumplora.code_version"].startswith(commit)
        model_id = models.version_model_id(version)  # the SQL registry keeps the source models:/<id> only
        logged = client.get_logged_model(model_id)
        parent = parent_run(client, run_dir)
        assert logged.source_run_id == parent.info.run_id and str(logged.status) == "READY"
        assert version.run_id == parent.info.run_id and tags.items() <= logged.tags.items()
        named = json.loads(logged.tags["mlflow.modelVersions"])  # the Models tab's "Registered models"
        assert named == [{"name": REGISTERED, "version": int(version.version)}]
        linked = {m.key: m.value for m in logged.metrics}
        assert {key: linked.get(key) for key in ("OA", "BWT", "cost/trainings", "cost/optimizer_steps")} == \
            {"OA": results.oa, "BWT": results.bwt, "cost/trainings": 2, "cost/optimizer_steps": 6}
        # linking the metrics added no value to the run's own history
        assert len(client.get_metric_history(parent.info.run_id, "OA")) == 1
        assert {o.model_id for o in client.get_run(parent.info.run_id).outputs.model_outputs} == {model_id}
    main_results = tracked.run_results(tracked.main_dir)
    last_row = main_results.accuracy_matrix[-1]

    with models._store(tracked.uri):
        pipeline = mlflow.transformers.load_model(f"models:/{REGISTERED}/1")
    assert pipeline.model.config.is_encoder_decoder and pipeline.tokenizer is not None

    scores = evaluated(capsys, f"models:/{REGISTERED}/1", tracked.uri)
    assert [scores[t] for t in main_results.tasks] == last_row
    # the model's other URIs name the same checkpoint (evaluated once: above)
    main_run, main_model = parent_run(client, tracked.main_dir).info.run_id, models.version_model_id(versions[0])
    weights = (tracked.main_dir / tracking.MERGED_MODEL_DIR / "model.safetensors").read_bytes()
    for source in (f"models:/{main_model}", f"runs:/{main_run}/merged_model"):
        with tracking.model_folder(source, tracked.uri) as folder:
            assert (folder / "model.safetensors").read_bytes() == weights, source

    assert predicted_accuracy(tracked.uri, f"models:/{REGISTERED}/1", main_results) == last_row[0]


def test_a_file_store_logs_the_model_and_says_in_one_line_it_cannot_register_it(tracked, tmp_path, capsys,
                                                                                monkeypatch):
    """The session's merged model logged to a run of a file store (the model alone: MLflow's file store cannot hold
    a whole run's metrics, `lambda` beside `lambda/01-…`)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    tracker, results = tracking.Tracker(uri), tracked.run_results(tracked.main_dir)
    run = tracking.start_run(tracker, "jumplora-order1", "file-store", "file-store", "run")
    model_id = tracking.log_merged_model(tracker, run, tracked.main_dir / tracking.MERGED_MODEL_DIR, results,
                                         "file-store", {}, REGISTERED)
    lines = [line for line in capsys.readouterr().err.splitlines() if "registry" in line]
    assert len(lines) == 1 and lines[0].startswith(f"warning: the MLflow store {uri} is a plain file store")
    assert tracker.enabled and not tracker.failed
    logged = MlflowClient(uri).search_logged_models([run.experiment_id])
    assert [(m.model_id, str(m.status)) for m in logged] == [(model_id, "READY")]
