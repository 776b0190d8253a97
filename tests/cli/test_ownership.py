"""Rule 1, the product writes only what it owns: every writing option of every command, pointed at a non-empty folder
jumplora did not write, is refused in one line before any work and leaves every file byte-identical; `--overwrite`
replaces only a run directory; the targets of one command lie apart; what a run keeps beside `--out` is checked up
front. None of these loads data or a model."""

from __future__ import annotations

import argparse
import json
import re

import pytest

import jumplora.continual
from jumplora import ownership
from jumplora.cli import build_parser, main
from jumplora.errors import JumpLoRAError
from jumplora.lock import Holder, lock_path


def tree(folder) -> dict[str, bytes | None]:
    """Every entry under `folder` (hidden ones too), with a file's bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def foreign(folder):
    """A folder of the user's own: a draft and a sub-folder of notes."""
    (folder / "notes").mkdir(parents=True)
    (folder / "thesis.tex").write_text("draft\n")
    (folder / "notes" / "todo.txt").write_text("cite the paper\n")
    return folder


@pytest.fixture(autouse=True)
def no_work(monkeypatch, tmp_path):
    """A refusal comes before any work: loading the data and the model fails the test; defaults land in tmp_path."""
    def loaded(*args, **kwargs):
        raise AssertionError("the data and the model were loaded before the refusal")

    monkeypatch.setattr(jumplora.continual, "prepare", loaded)
    monkeypatch.chdir(tmp_path)


def refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    return err[0]


def run_argv(*extra: str) -> list[str]:
    return ["run", "--quiet", "--no-tracking", *extra]


def completed_run(folder):
    """A run directory as an earlier version wrote it (no marker): a results.json of the schema read today."""
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"method": "inclora", "order": 1, "seed": 42, "oa": 0.5,
                                                     "bwt": -0.1}))
    (folder / "summary.txt").write_text("OA 50.00\n")
    return folder


def test_overwrite_refuses_a_folder_jumplora_did_not_write_and_the_thesis_survives(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "thesis.tex").write_text("draft\n")
    line = refused(run_argv("--out", str(d), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {d} holds files jumplora did not write (thesis.tex): it writes only into "
                    "a new or empty directory or a run directory of its own; pass another directory")
    assert tree(tmp_path) == {"d": None, "d/thesis.tex": b"draft\n"}  # no staging, no lock


def test_save_model_into_a_completed_run_directory_is_refused(tmp_path, capsys):
    run = completed_run(tmp_path / "run")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(run)), capsys)
    assert line == f"jumplora: error: --save-model {run} holds a run directory, not a saved model: pass another " \
                   "directory"
    ownership.claim(run, ownership.RUN, "jumplora run")  # the same run directory, marked by this version
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(run)), capsys)
    assert line == f"jumplora: error: --save-model {run} holds a run directory (written by `jumplora run`), not a " \
                   "saved model: pass another directory"
    assert {k: v for k, v in tree(tmp_path).items() if k != f"run/{ownership.MARKER}"} == before


@pytest.mark.parametrize(("save", "how"), [("x", "are the same directory"),
                                          ("x/model", "overlap (one lies inside the other)")])
def test_out_and_save_model_that_overlap_are_refused(tmp_path, capsys, save, how):
    run = completed_run(tmp_path / "x")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(run), "--save-model", str(tmp_path / save), "--overwrite"), capsys)
    assert line == f"jumplora: error: --out {run} and --save-model {tmp_path / save} {how}: each must be a " \
                   "directory of its own"
    assert tree(tmp_path) == before


def test_cache_inside_out_is_refused(tmp_path, capsys):
    line = refused(run_argv("--out", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "runs" / "cache")), capsys)
    assert "overlap (one lies inside the other)" in line and not (tmp_path / "runs").exists()


def test_a_staging_path_that_is_a_file_is_refused_before_training(tmp_path, capsys):
    run = completed_run(tmp_path / "run")
    staging = tmp_path / ".run.staging"
    staging.write_text("mine")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {run}: {staging}, where jumplora keeps the new run of an --overwrite, "
                    "is not a directory jumplora wrote: move it away or pass another directory")
    assert tree(tmp_path) == before


def test_a_staging_folder_of_someone_else_is_refused(tmp_path, capsys):
    run = completed_run(tmp_path / "run")
    foreign(tmp_path / ".run.staging")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line.startswith(f"jumplora: error: {tmp_path / '.run.staging'} (where jumplora keeps the new run of an "
                           f"--overwrite of --out {run}) holds files jumplora did not write (notes, thesis.tex)")
    assert tree(tmp_path) == before


def test_a_lock_path_that_is_a_folder_is_refused(tmp_path, capsys):
    lock_path(tmp_path / "run").mkdir()
    line = refused(run_argv("--out", str(tmp_path / "run")), capsys)
    assert line == (f"jumplora: error: --out {tmp_path / 'run'}: its lock {lock_path(tmp_path / 'run')} is not a "
                    "file: move it away or pass another directory")


def test_a_run_directory_in_use_is_refused_before_the_model_loads(tmp_path, capsys):
    out = tmp_path / "run"
    lock_path(out).write_text(Holder.this_process("jumplora run").to_text())  # this process: alive
    line = refused(run_argv("--out", str(out)), capsys)
    assert line.startswith(f"jumplora: error: {out} is being written by `jumplora run`")  # and `prepare` not called


def test_a_report_folder_of_someone_else_is_refused(tmp_path, capsys):
    folder = foreign(tmp_path / "report")
    before = tree(folder)
    line = refused(["report", str(tmp_path / "runs"), "--out", str(folder)], capsys)
    assert line.startswith(f"jumplora: error: --out {folder} holds files jumplora did not write (notes, thesis.tex)")
    assert tree(folder) == before


# --- the property, over every writing option of every command (their `ownership.writes` metadata)

def jumplora_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(the words naming a `jumplora` command, its parser) for every command and sub-command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from jumplora_commands(sub, (*prefix, name))
    if prefix:
        yield prefix, parser


def entry_points():
    """(name, main returning the exit code, parser, the arguments it needs besides a writing option) of every entry
    point: each `jumplora` command and the Ray scripts (smallest settings, no tracking)."""
    from ray_jobs import cli, grid, sequence, sweep

    needed = {("run",): ["--quiet", "--no-tracking"], ("report",): ["no-runs-here"], ("data", "build"): []}
    for words, parser in jumplora_commands(build_parser()):
        yield " ".join(words), lambda argv, w=words: main([*w, *argv]), parser, needed.get(words, [])
    smoke = ["--preset", "smoke", "--no-tracking", "--max-tasks", "2"]
    for module, args in ((grid, ["--order", "1"]), (sequence, []),
                         (sweep, ["--methods", "inclora", "--orders", "1", "--seeds", "1"])):
        yield module.build_parser().prog, lambda argv, m=module: cli.run_main(m.main, argv), module.build_parser(), \
            [*args, *smoke]


WRITERS = [(name, action.option_strings[0], run, needed) for name, run, parser, needed in entry_points()
           for action in parser._actions if hasattr(action, "writes")]


def test_every_writing_option_is_found():
    found = {(name, option) for name, option, *_ in WRITERS}
    assert {("run", "--out"), ("run", "--save-model"), ("run", "--cache-dir"), ("report", "--out"),
            ("data build", "--out"), ("grid_lambda.py", "--storage-path"), ("reproduce.py", "--cache-dir")} <= found
    assert len(found) == len(WRITERS) == 11  # 3 of run, report, data build, 2 of each of the 3 Ray scripts


@pytest.mark.parametrize(("name", "option", "run", "needed"), WRITERS,
                         ids=[f"{name} {option}" for name, option, *_ in WRITERS])
def test_a_writing_option_pointed_at_a_folder_of_someone_else_changes_nothing(name, option, run, needed, tmp_path,
                                                                             capsys):
    folder = foreign(tmp_path / "storage" / "mine" if option == "--storage-path" else tmp_path / "mine")
    given = ["--storage-path", str(tmp_path / "storage"), "--name", "mine"] if option == "--storage-path" \
        else [option, str(folder)]
    if name.endswith(".py") and option != "--storage-path":  # the job's own folder: new, under tmp_path
        (tmp_path / "storage").mkdir()
        given += ["--storage-path", str(tmp_path / "storage")]
    before = tree(tmp_path)
    assert run([*needed, *given]) != 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(folder) in err[0], err
    assert tree(tmp_path) == before


def test_a_saved_model_of_its_own_is_replaced_whole(tmp_path):
    """`--save-model` over a model it saved before: the new one is written aside and swapped in; nothing of the old
    one stays, nothing is left beside it."""
    from types import SimpleNamespace

    from jumplora.cli import save_model

    model = tmp_path / "model"
    ownership.claim(model, ownership.MODEL, "jumplora run --save-model")
    (model / "old-weights.bin").write_text("old")

    def saver(name):
        return SimpleNamespace(save_pretrained=lambda where: (where / name).write_text("new"))

    save_model(SimpleNamespace(model=saver("model.safetensors"), tokenizer=saver("tokenizer.json")), model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in model.iterdir()) == sorted([ownership.MARKER, "model.safetensors", "tokenizer.json"])
    assert ownership.read_owner(ownership.LocalFolder(model)).kind == "model"


def test_a_job_folder_is_its_scripts_own(tmp_path, capsys):
    """A grid's folder resumes as the grid's; another script, or a run directory inside it, is refused."""
    from ray_jobs.storage import GRID, SEQUENCE, Storage

    storage, cache = Storage(str(tmp_path / "storage")), str(tmp_path / "cache")
    storage.check_own("demo", GRID, cache)
    assert not (tmp_path / "storage" / "demo").exists()  # checked only: marked once the job's requests fit
    storage.mark("demo", GRID)
    (tmp_path / "storage" / "demo" / "manifest.json").write_text("{}")
    storage.check_own("demo", GRID, cache)  # resubmitted: its own
    with pytest.raises(JumpLoRAError, match=re.escape(
            f"--storage-path/--name {tmp_path / 'storage' / 'demo'} holds a grid_lambda.py folder (written by "
            "`grid_lambda.py`), not a train_sequence.py folder: pass another directory")):
        storage.check_own("demo", SEQUENCE, cache)
    out = tmp_path / "storage" / "demo" / "run"
    line = refused(run_argv("--out", str(out)), capsys)
    assert line == (f"jumplora: error: --out {out} lies inside a grid_lambda.py folder written by `grid_lambda.py` "
                    f"({tmp_path / 'storage' / 'demo'}): pass a directory outside it")
    assert not out.exists()
