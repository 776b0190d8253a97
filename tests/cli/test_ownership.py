"""Rule 1, the product writes only what it owns: every writing option of every command, pointed at a non-empty folder
jumplora did not write, is refused in one line before any work and leaves every file byte-identical; `--overwrite`
replaces only a run directory; the targets of one command lie apart; what a run keeps beside `--out` is checked up
front. None of these loads data or a model."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

import jumplora
import jumplora.continual
from jumplora import ownership
from jumplora.cli import build_parser, main
from jumplora.errors import JumpLoRAError
from jumplora.lock import Holder, lock_path


def tree(folder) -> dict[str, bytes | None]:
    """Every entry under `folder` (hidden ones too), with a file's bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def hashed(folder) -> dict[str, str | None]:
    """Every entry under `folder`, through symbolic links too: a file's sha256, a link's target, None for a folder."""
    found: dict[str, str | None] = {}
    for root, dirs, names in os.walk(folder, followlinks=True):
        for name in [*dirs, *names]:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                found[key + " ->"] = os.readlink(path)
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return found


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


# --- ownership at the level of files (a sealed marker lists what the product wrote) and symbolic links

def finished(kind: ownership.Kind, folder: Path) -> Path:
    """A finished artifact of `kind` at `folder`, sealed as its writer seals it: its files listed in the marker."""
    own = {"run": ["results.json", "summary.txt", "checkpoints/after_task01/model.safetensors"],
           "model": ["config.json", "model.safetensors"], "report": ["report.md", "report.html"],
           "cache": ["tiny-0123/config.json"], "data": ["tasks.json"]}.get(kind.name, ["manifest.json", "job.json"])
    for name in own:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(completed_text if name == "results.json" else f"{kind.name} {name}\n")
    if kind.name not in ("cache", "data"):  # a cache and a data folder carry no marker
        (folder / ownership.MARKER).write_text(json.dumps({"kind": kind.name, "command": "test",
                                                           "version": jumplora.__version__, "files": own}))
    return folder


completed_text = json.dumps({"method": "inclora", "order": 1, "seed": 42, "oa": 0.5, "bwt": -0.1})


def test_overwrite_of_a_run_with_a_file_of_the_users_is_refused_and_the_file_survives(tmp_path, capsys):
    """The first case of the issue: `run --overwrite` on a finished run to which the user added a file."""
    run = finished(ownership.RUN, tmp_path / "run")
    (run / "analysis.ipynb").write_text("my notebook\n")
    before = hashed(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {run} is a run directory of jumplora's, but holds analysis.ipynb, which "
                    "jumplora did not write: move it out (jumplora replaces only what it wrote) or pass another "
                    "directory")
    assert hashed(tmp_path) == before


def test_a_later_save_into_a_model_with_a_file_of_the_users_is_refused(tmp_path, capsys):
    """The second case: a later run's `--save-model` into a saved model to which the user added a file."""
    model = finished(ownership.MODEL, tmp_path / "model")
    (model / "notes").mkdir()
    (model / "notes" / "eval.txt").write_text("mine\n")
    before = hashed(tmp_path)
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(model)), capsys)
    assert line == (f"jumplora: error: --save-model {model} is a saved model of jumplora's, but holds notes/eval.txt, "
                    "which jumplora did not write: move it out (jumplora replaces only what it wrote) or pass "
                    "another directory")
    assert hashed(tmp_path) == before


@pytest.mark.parametrize("option", ["--out", "--save-model"])
def test_a_symbolic_link_at_a_target_is_refused_never_swapped(option, tmp_path, capsys):
    """The third and fourth cases: a link the user made at `--out` or `--save-model`, to a folder of the product's
    kind, is refused (the swap renamed the link to `.NAME.replaced` and put a folder in its place)."""
    real = finished(ownership.RUN if option == "--out" else ownership.MODEL, tmp_path / "disk" / "real")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    before = hashed(tmp_path)
    extra = ["--overwrite"] if option == "--out" else ["--out", str(tmp_path / "new")]
    line = refused(run_argv(option, str(link), *extra), capsys)
    assert line == (f"jumplora: error: {option} {link} is a symbolic link (to {real}): jumplora writes only into a "
                    "real directory, which it may replace whole; pass the directory itself or another path")
    assert hashed(tmp_path) == before


def test_a_swap_deletes_only_what_the_product_wrote(tmp_path, capsys):
    """A file added to a run while its `--overwrite` ran (after the check) stays, in the old folder, with a line."""
    from jumplora.ownership import replaced_dir, swap_in

    old = finished(ownership.RUN, tmp_path / "run")
    (old / "late.txt").write_text("added while the new run trained\n")
    new = finished(ownership.RUN, tmp_path / ".run.staging")
    (new / "summary.txt").write_text("the new run\n")
    swap_in(new, old, ownership.RUN)
    assert (old / "summary.txt").read_text() == "the new run\n" and not new.exists()
    assert tree(replaced_dir(old)) == {"late.txt": b"added while the new run trained\n",
                                       ownership.MARKER: ownership.Owner.mark(ownership.RUN, "test", []).encode()}
    assert capsys.readouterr().err == (f"warning: {replaced_dir(old)} keeps late.txt, which jumplora did not write "
                                       f"(added to {old} while it ran): move what you need and delete the folder\n")
    with pytest.raises(JumpLoRAError, match=re.escape(f"{replaced_dir(old)} (where jumplora keeps the old run during "
                                                      f"an --overwrite swap of --out {old}) is a run directory of "
                                                      "jumplora's, but holds late.txt")):  # the next run: refused
        ownership.check_run(old, None, tmp_path / "cache")
    (replaced_dir(old) / "late.txt").unlink()  # moved away: the next swap takes the old folder whole
    swap_in(finished(ownership.RUN, tmp_path / ".run.staging"), old, ownership.RUN)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_seal_lists_what_was_written_and_remove_owned_keeps_the_rest(tmp_path):
    folder = tmp_path / "run"
    ownership.claim(folder, ownership.RUN, "jumplora run")
    (folder / "checkpoints" / "after_task01").mkdir(parents=True)
    (folder / "checkpoints" / "after_task01" / "model.safetensors").write_text("w")
    (folder / ".summary.txt.tmp").write_text("being written")
    ownership.seal(folder, ownership.RUN, "jumplora run")
    owner = ownership.read_owner(ownership.LocalFolder(folder))
    assert owner.files == ("checkpoints/after_task01/model.safetensors",)  # not the marker, not what is aside
    (folder / "mine.txt").write_text("user")
    assert ownership.remove_owned(folder, ownership.RUN) == ["mine.txt"]
    assert tree(folder) == {"mine.txt": b"user", ownership.MARKER: ownership.Owner.mark(ownership.RUN, "jumplora run",
                                                                                         []).encode()}


def test_a_run_marked_before_file_lists_is_judged_by_the_names_it_writes(tmp_path, capsys):
    """A marker without `files` (this product before lists): the kind's own names are its, anything else is not."""
    run = completed_run(tmp_path / "run")
    ownership.claim(run, ownership.RUN, "jumplora run")
    (run / "accuracy_heatmap.png").write_text("plot")
    before = hashed(tmp_path)
    with pytest.raises(JumpLoRAError, match="already holds a completed run"):  # its own files only: not refused
        ownership.check(run, ownership.RUN, "--out") or (_ for _ in ()).throw(
            JumpLoRAError(f"{run} already holds a completed run"))
    (run / "thesis.tex").write_text("draft\n")
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert "holds thesis.tex, which jumplora did not write" in line
    assert {k: v for k, v in hashed(tmp_path).items() if k != "run/thesis.tex"} == before


def link_to(target: Path, at: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target, target_is_directory=True)
    return at


def target_case(case: str, kind: ownership.Kind, tmp_path: Path, at: Path) -> Path:
    """The target `case` at the path `at`: a user's file inside a finished artifact of the option's own kind, or a
    symbolic link to an empty folder, to a folder of user files, to a finished artifact."""
    elsewhere = tmp_path / "elsewhere"
    if case == "user file inside a finished artifact":
        folder = finished(kind, at)
        (folder / "mine.txt").write_text("the user's\n")
        return folder
    if case == "link to an empty folder":
        elsewhere.mkdir()
    elif case == "link to a folder of user files":
        foreign(elsewhere)
    else:
        finished(kind, elsewhere)
    return link_to(elsewhere, at)


CASES = ["user file inside a finished artifact", "link to an empty folder", "link to a folder of user files",
         "link to a finished artifact"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("name", "option", "run", "needed"), WRITERS,
                         ids=[f"{name} {option}" for name, option, *_ in WRITERS])
def test_a_writing_option_replaces_or_deletes_nothing_it_did_not_write(name, option, run, needed, case, tmp_path,
                                                                      capsys):
    """Every writing option of every command, against each target: refused in one line naming it, and every file,
    reached through links too, hashed the same before and after."""
    parser = next(parser for entry, _, parser, _ in entry_points() if entry == name)
    kind = next(action.writes for action in parser._actions if option in action.option_strings)
    storage = option == "--storage-path"
    folder = target_case(case, kind, tmp_path, tmp_path / "storage" / "mine" if storage else tmp_path / "mine")
    given = ["--storage-path", str(tmp_path / "storage"), "--name", "mine"] if storage else [option, str(folder)]
    if name.endswith(".py") and not storage:  # the job's own folder: new, under tmp_path
        (tmp_path / "storage").mkdir()
        given += ["--storage-path", str(tmp_path / "storage")]
    if name == "run" and option == "--out":
        given.append("--overwrite")  # what would replace a finished run
    before = hashed(tmp_path)
    assert run([*needed, *given]) != 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(folder) in err[0], err
    assert hashed(tmp_path) == before
