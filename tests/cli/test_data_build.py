"""`jumplora data build`: the builder as a command, writing to the default location unless `--out` says otherwise;
bad input is one line and exit code 2 with nothing written (no download is tried here: the tests are offline)."""

import sys

import pytest

from jumplora.cli import main
from jumplora.data import builder, location


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """Replaces the builder: records its arguments and writes only the output folder."""
    recorded = []

    def build(out, *, tasks=None):
        recorded.append((out, tasks))
        return tmp_path / "written"

    monkeypatch.setattr(builder, "build_cl_benchmark", build)
    return recorded


def test_builds_at_the_default_location(calls, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(location, "DEFAULT_DATA_DIR", "/somewhere/CL_Benchmark")
    assert main(["data", "build"]) == 0
    assert calls == [("/somewhere/CL_Benchmark", None)]
    out = capsys.readouterr().out
    assert out.splitlines() == ["building CL_Benchmark in /somewhere/CL_Benchmark from the Hugging Face Hub",
                                f"wrote {tmp_path / 'written'}"]


def test_out_and_tasks_are_passed_on(calls, tmp_path):
    assert main(["data", "build", "--out", str(tmp_path / "mine"), "--tasks", "cb, rte"]) == 0
    assert calls == [(str(tmp_path / "mine"), ["cb", "rte"])]


@pytest.mark.parametrize(("args", "message"), [
    (["--tasks", "cb,nope"], "unknown task"),
    (["--tasks", "cb"], "needs the optional package 'datasets': pip install 'jumplora[build-data]'"),
])
def test_bad_input_writes_nothing(args, message, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as without the extra build-data
    assert main(["data", "build", "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_folder_is_refused(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert main(["data", "build", "--out", str(tmp_path / "out")]) == 2
    assert f"jumplora: error: argument --out: {tmp_path / 'out'} exists already: pass a path that does not exist yet" \
        in capsys.readouterr().err
