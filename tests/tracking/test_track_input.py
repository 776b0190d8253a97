"""What `jumplora track` reads is checked as data before anything is logged: a results.json or a grid manifest of
another schema, with a key missing or a number that is not finite is refused in one line naming it, and the store is
not even opened; an MLflow store that can never answer (a mistyped sqlite path, an unknown scheme, a runs root that
is a file) is refused at the start, creating nothing."""

import json

import pytest

from jumplora import tracking
from jumplora.cli import main
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError

RESULTS = {"schema": 1, "order": 1, "method": "inclora", "seed": 42, "oa": 50.0, "bwt": -1.0,
           "tasks": ["dbpedia"], "accuracy_matrix": [[0.5]], "config": RunConfig().to_dict()}
STAGE = {"task": 1, "task_name": "dbpedia", "selected_lam": 0.0, "baselines": [],
         "trials": [{"lam": 0.0, "dev_mean": 0.4, "test_mean": 0.3, "selected": True}]}


def manifest(stages) -> dict:
    return {"job": {"run": RunConfig().to_dict(), "lambdas_tried": [[0.0]]}, "stages": stages}


def write(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data))
    return str(folder)


@pytest.mark.parametrize(("name", "data", "message"), [
    ("results.json", {**RESULTS, "schema": 2}, "has schema 2; this jumplora reads schema 1"),
    ("results.json", {key: v for key, v in RESULTS.items() if key != "oa"}, "lacks 'oa'"),
    ("results.json", {**RESULTS, "accuracy_matrix": [[float("nan")]]}, "holds a number that is not finite "
                                                                       "(accuracy_matrix[0][0] = nan)"),
    ("manifest.json", manifest([{**STAGE, "trials": None}]), "is not a grid manifest this jumplora reads"),
    ("manifest.json", manifest([{key: v for key, v in STAGE.items() if key != "selected_lam"}]),
     "is not a grid manifest this jumplora reads"),
    ("manifest.json", {"stages": []}, "is not a grid manifest this jumplora reads (KeyError: 'job')"),
    ("manifest.json", manifest([{**STAGE, "selected_lam": float("inf")}]), "holds a number that is not finite"),
])
def test_a_damaged_source_is_refused_before_anything_is_logged(name, data, message, tmp_path, capsys):
    """The damaged source comes second: the first (a grid with no finished stage) is not logged either."""
    good = write(tmp_path / "grid-ok", "manifest.json", manifest([]))
    bad = write(tmp_path / "bad", name, data)
    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    assert main(["track", good, bad, "--tracking-uri", f"sqlite:///{store}"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"jumplora: error: {bad}") and message in err[0], err
    assert not store.exists()  # the store was not even opened


@pytest.mark.parametrize(("uri", "message"), [
    ("sqlite://relative.db", "a SQLite store is sqlite:///relative/path.db"),
    ("sqlite:///{tmp}/missing/mlflow.db", "the folder {tmp}/missing does not exist: create it first"),
    ("nosuch://host/x", "unknown scheme 'nosuch'"),
])
def test_a_store_that_can_never_answer_is_refused_and_nothing_is_created(uri, message, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri, message = uri.format(tmp=tmp_path), message.format(tmp=tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert main(["track", str(tmp_path), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "argument --tracking-uri" in err[0] and message in err[0], err
    monkeypatch.setenv(tracking.URI_ENV, uri)  # the same from the environment, where a run starts
    with pytest.raises(JumpLoRAError, match=f"^\\$MLFLOW_TRACKING_URI: .*{message[:20]}"):
        tracking.resolve_uri()
    assert sorted(tmp_path.rglob("*")) == before


def test_a_runs_root_that_is_a_file_is_refused_before_a_run_starts(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    root.write_text("not a folder")
    monkeypatch.delenv(tracking.URI_ENV, raising=False)
    monkeypatch.setenv("JUMPLORA_RUNS_ROOT", str(root))
    assert main(["run", "--quiet", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"jumplora: error: the runs root {root} ($JUMPLORA_RUNS_ROOT, else ./runs), where the MLflow store "
                   "is, is a file: pass a folder to write; or pass --tracking-uri or --no-tracking"]
    assert sorted(tmp_path.iterdir()) == [root]
