"""The merged model as an MLflow model: the session's two tracked runs registered it as versions 1 and 2 of `demo`
(LoggedModels linked to their runs, with the run's metrics and tags), loaded back by `jumplora eval` from its URIs
with the run's own last test row (its order, tasks, seed and caps read from the run, none given), and by the two
routes of the README's Python block, which give the labels whose exact-match rate is the run's accuracy (the causal
preset's: in tests/continual/test_continual.py, on its causal run); a registration says in one line which version
of which name it made in which store; a plain file store logs the model and says in one line that it cannot
register it."""

import json
import re
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from jumplora import tracking
from jumplora.cli import main
from jumplora.data import load_benchmark
from jumplora.data.encode import normalise_answer, prompt_source
from jumplora.runtime import provenance
from jumplora.tracking import models
from tests.tracking.conftest import REGISTERED

EVAL_CAPS = {"max_train_per_task": 65, "max_eval_per_task": 16}  # = the tracked runs' CAPS
README = Path(__file__).resolve().parents[2] / "README.md"


def parent_run(client, run_dir):
    experiment = client.get_experiment_by_name("jumplora-order1")
    return next(r for r in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
                if r.info.run_name == run_dir.name and r.data.tags[tracking.KIND_TAG] == "run")


def evaluated(capsys, source: str, uri: str) -> list[str]:
    """`jumplora eval SOURCE` as the README gives it: no order, no caps (the run's are read)."""
    capsys.readouterr()
    assert main(["eval", source, "--quiet", "--json", "--tracking-uri", uri]) == 0
    return capsys.readouterr().out.splitlines()


def readme_block() -> str:
    """The Python block of the README that loads a registered model back."""
    text = README.read_text()
    return re.search(r"```python\n(.*?)```", text[text.index("Loading it back"):], re.S).group(1)


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
            {"OA": round(results.oa, 2), "BWT": round(results.bwt, 2), "cost/trainings": 2, "cost/optimizer_steps": 6}
        # linking the metrics added no value to the run's own history
        assert len(client.get_metric_history(parent.info.run_id, "OA")) == 1
        assert {o.model_id for o in client.get_run(parent.info.run_id).outputs.model_outputs} == {model_id}
    main_results = tracked.run_results(tracked.main_dir)
    last_row = main_results.accuracy_matrix[-1]

    # the acceptance of issue 46: a registered model of a 2-task capped run, evaluated with nothing but its URI,
    # scores the tasks the run trained as the run scored them, beside the run's last row, which it equals
    lines = evaluated(capsys, f"models:/{REGISTERED}/1", tracked.uri)
    assert lines[0] == ("as its run scored it: order 1, the 2 task(s) it trained, seed 42, data synthetic, "
                        "--max-eval-per-task 16")
    assert lines[1].split() == ["task", "eval", "95", "%", "interval", "run", "95", "%", "interval"]
    assert [line.split()[0] for line in lines[2:5]] == ["dbpedia", "amazon", "mean"]
    for line, value in zip(lines[2:5], [*last_row, sum(last_row) / 2], strict=True):
        cells = line.split()[1:]  # the model's accuracy and interval, then the run's: the same
        assert cells[0] == f"{100 * value:.2f}" and cells[:3] == cells[3:], line
    assert json.loads(lines[-1]) == dict(zip(main_results.tasks, last_row, strict=True))
    # the model's other URIs name the same checkpoint (evaluated once: above)
    main_run, main_model = parent_run(client, tracked.main_dir).info.run_id, models.version_model_id(versions[0])
    weights = (tracked.main_dir / tracking.MERGED_MODEL_DIR / "model.safetensors").read_bytes()
    for source in (f"models:/{main_model}", f"runs:/{main_run}/merged_model"):
        with tracking.model_folder(source, tracked.uri) as folder:
            assert (folder / "model.safetensors").read_bytes() == weights, source
        assert tracking.recorded_run(source, tracked.uri) == main_results, source


def test_the_readmes_two_routes_load_the_registered_model_and_give_its_labels(tracked):
    """The README's block run as written, `prompts` task 1's test prompts as the run built them: the pyfunc's labels
    and those the transformers flavor's model and tokenizer generate are the labels whose exact-match rate is the
    run's accuracy on task 1 after its last task."""
    results = tracked.run_results(tracked.main_dir)
    task = results.tasks[0]
    data = load_benchmark(None, seed=results.config["seed"], tasks=[task], **EVAL_CAPS).tasks[task]
    block = readme_block()
    assert f'"models:/{REGISTERED}/1"' in block
    namespace = {"prompts": [prompt_source(data.spec, e.text) for e in data.test]}
    with models._store(tracked.uri):
        exec(block, namespace)  # noqa: S102 - the README's own code, as a user runs it
    assert namespace["model"].config.is_encoder_decoder
    for route in ("labels", "generated"):
        answers = [normalise_answer(answer) for answer in namespace[route]]
        right = [answer == normalise_answer(e.label) for answer, e in zip(answers, data.test, strict=True)]
        assert sum(right) / len(right) == results.accuracy_matrix[-1][0], route
    assert namespace["labels"] == [normalise_answer(answer) for answer in namespace["generated"]]


def test_a_registration_says_which_version_of_which_name_it_made_in_which_store(tracked, tmp_path, capsys):
    """The first version of a new name, registered from the session's model in a copy of its store: one line; the
    same model again: nothing new, no line."""
    shutil.copy(tracked.root / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    version = MlflowClient(uri).get_model_version(REGISTERED, "1")
    tracker = tracking.Tracker(uri)
    capsys.readouterr()
    assert models.register_model(tracker, models.version_model_id(version), "copied", version.run_id, {}) == 1
    assert capsys.readouterr().out == (f"registered the model as 'copied' version 1 (models:/copied/1) in the MLflow "
                                       f"store sqlite:///{tmp_path}/mlflow.db\n")
    assert models.register_model(tracker, models.version_model_id(version), "copied", version.run_id, {}) == 1
    assert capsys.readouterr().out == "" and not tracker.failed


def test_a_file_store_logs_the_model_and_says_in_one_line_it_cannot_register_it(tracked, tmp_path, capsys,
                                                                                monkeypatch):
    """The session's merged model logged to a run of a file store (the model alone: MLflow's file store cannot hold
    a whole run's metrics, `lambda` beside `lambda/01-…`)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    tracker, results = tracking.Tracker(uri), tracked.run_results(tracked.main_dir)
    run = tracker.start("jumplora-order1", "file-store", "file-store", "run")
    model_id = tracking.log_merged_model(tracker, run, tracked.main_dir / tracking.MERGED_MODEL_DIR, results,
                                         "file-store", {}, REGISTERED)
    lines = [line for line in capsys.readouterr().err.splitlines() if "registry" in line]
    assert len(lines) == 1 and lines[0].startswith(f"warning: the MLflow store {uri} is a plain file store")
    assert tracker.enabled and not tracker.failed
    logged = MlflowClient(uri).search_logged_models([run.experiment_id])
    assert [(m.model_id, str(m.status)) for m in logged] == [(model_id, "READY")]
