"""A refusal reads and writes nothing and is quick: `--order` is checked before torch, MLflow or a store is touched;
a read of a store that is not there creates none; what the user gave is printed escaped, in one line; `~` is the
path checked and the path used; `report --out` inside a run directory is refused; a method left out of the report's
comparisons is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jumplora import kinds, outputs
from jumplora.cli import main
from jumplora.errors import one_line
from jumplora.report import runs
from tests.conftest import REPO

UNKNOWN_ORDER = "jumplora: error: unknown order 99: choose one of 1, 2, 3, 4, 5, 6 (see `jumplora orders`)"


def test_a_refusal_loads_no_torch_mlflow_or_ray_and_makes_no_store(tmp_path):
    """Before: `run --order 99` and `report no-such-run` took 10–27 s (torch and MLflow loaded, runs/mlflow.db
    created, then the data or the store read)."""
    code = ("import sys; from jumplora.cli import main; "
            "print([main(argv) for argv in (['run', '--order', '99'], ['report', 'no-such-run'], "
            "['eval', 'models:/no-such/1'])], "
            "[name for name in ('torch', 'mlflow', 'ray', 'transformers') if name in sys.modules])")
    env = {name: value for name, value in os.environ.items() if name not in ("MLFLOW_TRACKING_URI",
                                                                           "JUMPLORA_RUNS_ROOT")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO)})
    assert done.stdout == "[2, 2, 2] []\n"
    assert done.stderr.splitlines()[0] == UNKNOWN_ORDER and len(done.stderr.splitlines()) == 3
    assert not any(tmp_path.iterdir())
    assert runs.RESULTS == outputs.RESULTS


def test_a_read_of_a_store_that_is_not_there_creates_none(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("JUMPLORA_RUNS_ROOT", raising=False)
    store = tmp_path / "runs" / "mlflow.db"
    missing = (f"the MLflow store sqlite:///{store} does not exist (no file {store}): check the path, or pass "
               "another --tracking-uri")
    assert main(["report", "no-such-run"]) == 2
    assert capsys.readouterr().err == (f"jumplora: error: 'no-such-run' is neither a run directory nor an MLflow "
                                       f"experiment: {missing}\n")
    assert main(["eval", "models:/no-such/1"]) == 2
    assert capsys.readouterr().err == f"jumplora: error: models:/no-such/1: no model there: {missing}\n"
    assert not any(tmp_path.iterdir())


def test_what_the_user_gave_is_printed_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert one_line("a\nb\tc\x1b[31m λ ≥ 1") == "a\\nb\\tc\\x1b[31m λ ≥ 1"
    assert main(["report", str(tmp_path / "a\nb"), "--tracking-uri", f"sqlite:///{tmp_path}/x\ny.db"]) == 2
    assert capsys.readouterr().err == (
        f"jumplora: error: '{tmp_path}/a\\nb' is neither a run directory nor an MLflow experiment: the MLflow store "
        f"sqlite:///{tmp_path}/x\\ny.db does not exist (no file {tmp_path}/x\\ny.db): check the path, or pass "
        "another --tracking-uri\n")
    assert main(["run", "--register-model", "a\nb"]) == 2
    assert capsys.readouterr().err == ("jumplora: error: argument --register-model: expected a name without control "
                                       "characters (a newline, a tab, ...), got 'a\\nb' (see `jumplora run --help`)\n")
    assert not any(tmp_path.iterdir())


def test_the_path_checked_is_the_path_used():
    """Before: `--out '~'` was checked as the home folder and written as ./~."""
    home = os.path.expanduser("~")
    assert kinds.PathKind(kinds.WRITABLE)("~") == home
    assert kinds.PathKind(kinds.FOLDER, words=("synthetic",))("~") == home
    assert kinds.Uri(kinds.TRACKING_SCHEMES)("~") == home


def test_a_report_inside_a_run_directory_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"order": 1}))  # a run's, without the product's record
    assert main(["report", str(run), "--out", str(run / "report" / "here")]) == 2
    assert capsys.readouterr().err == (f"jumplora: error: --out {run / 'report' / 'here'} lies inside the run "
                                       f"directory {run}: pass a directory outside it\n")
    assert sorted(path.name for path in run.iterdir()) == ["results.json"]
