"""Rule 1, the product writes only what it owns: every writing option of every command, pointed at a target that is
not its to write (a folder of user files, a file, a symbolic link, a parent it cannot write in, a user's file inside
a finished artifact), is refused in one line before any work and leaves every file byte-identical; a finished
artifact that another command wrote is replaced only with `--overwrite`, and only once the new one is complete; the
targets of one command lie apart; what a run keeps beside `--out` is checked up front. None of these loads data or a
model: the work is stubbed where it begins (`Reached`)."""

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
from jumplora import metrics, ownership
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


class Reached(JumpLoRAError):
    """Raised where a command's work begins (a run loads its data and model, a Ray job takes its folder's lock): the
    checks let it through."""


REACHED = "the work began"


@pytest.fixture(autouse=True)
def no_work(monkeypatch, tmp_path):
    """Nothing is loaded or trained: where the work begins, `Reached` ends the command (one line, exit 2); a refusal
    comes before. Defaults land in tmp_path, where the report's source run is."""
    from jumplora.storage import Storage

    def reached(*args, **kwargs):
        raise Reached(REACHED)

    monkeypatch.setattr(jumplora.continual, "prepare", reached)
    monkeypatch.setattr(Storage, "lock", reached)
    monkeypatch.chdir(tmp_path)


def source_run(folder: Path, oa: float) -> Path:
    """A finished run that `jumplora report` reads (two tasks; `oa`, the mean of its last row)."""
    matrix = [[0.8, None], [oa - 0.1, oa + 0.1]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({
        "order": 1, "method": "inclora", "seed": 42, "tasks": ["t1", "t2"], "accuracy_matrix": matrix,
        "oa": metrics.overall_accuracy(matrix), "bwt": metrics.backward_transfer(matrix)}))
    return folder


def refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and REACHED not in err[0], err
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


SOURCE = "<source run>"  # in `needed`: the run `jumplora report` reads (`source_run`, made by each test)


def entry_points():
    """(name, main returning the exit code, parser, the arguments it needs besides a writing option) of every entry
    point: each `jumplora` command and the Ray scripts (smallest settings, no tracking)."""
    from ray_jobs import cli, grid, sequence, sweep

    needed = {("run",): ["--quiet", "--no-tracking"], ("report",): [SOURCE], ("data", "build"): []}
    for words, parser in jumplora_commands(build_parser()):
        yield " ".join(words), lambda argv, w=words: main([*w, *argv]), parser, needed.get(words, [])
    smoke = ["--preset", "smoke", "--no-tracking", "--max-tasks", "2"]
    for module, args in ((grid, ["--order", "1"]), (sequence, []),
                         (sweep, ["--methods", "inclora", "--orders", "1", "--seeds", "1"])):
        yield module.build_parser().prog, lambda argv, m=module: cli.run_main(m.main, argv), module.build_parser(), \
            [*args, *smoke]


WRITERS = [(name, action.option_strings[0], run, needed, parser) for name, run, parser, needed in entry_points()
           for action in parser._actions if hasattr(action, "writes")]
IDS = [f"{name} {option}" for name, option, *_ in WRITERS]


def kind_of(parser: argparse.ArgumentParser, option: str) -> ownership.Kind:
    return next(action.writes for action in parser._actions if option in action.option_strings)


def has_overwrite(parser: argparse.ArgumentParser) -> bool:
    return any(ownership.OVERWRITE in action.option_strings for action in parser._actions)


def test_every_writing_option_is_found():
    found = {(name, option) for name, option, *_ in WRITERS}
    assert {("run", "--out"), ("run", "--save-model"), ("run", "--cache-dir"), ("report", "--out"),
            ("data build", "--out"), ("grid_lambda.py", "--storage-path"), ("reproduce.py", "--cache-dir")} <= found
    assert len(found) == len(WRITERS) == 11  # 3 of run, report, data build, 2 of each of the 3 Ray scripts


def test_every_command_that_may_replace_a_finished_artifact_has_overwrite_and_its_help_names_what():
    """The commands with a writing option of a kind that only `--overwrite` replaces are `run` and `report`, and their
    `--overwrite` says which options (one help, from `ownership.add_overwrite`); no other command has one."""
    replacing = {name: [option for n, option, _, _, parser in WRITERS if n == name
                        and kind_of(parser, option).finished is not None] for name, *_ in WRITERS}
    assert {name: options for name, options in replacing.items() if options} == {"run": ["--out", "--save-model"],
                                                                                  "report": ["--out"]}
    helps = {name: next((action.help for action in parser._actions if ownership.OVERWRITE in action.option_strings),
                        None) for name, _, parser, _ in entry_points()}
    common = ("the new one is written aside and takes its place only once complete (never a file jumplora did not "
              "write)")
    assert helps["run"] == (f"replace what an earlier command finished at --out, --save-model: {common}; a run cut "
                            "off at --out starts over instead of going on")
    assert helps["report"] == f"replace what an earlier command finished at --out: {common}"
    assert {name for name, text in helps.items() if text is not None} == {"run", "report"}


def finished(kind: ownership.Kind, folder: Path, job: dict | None = None) -> Path:
    """A finished artifact of `kind` at `folder`, sealed as its writer seals it: its files listed in the marker (a
    job's folder, with the digest of `job`: another configuration than the tests' by default)."""
    own = {"run": ["results.json", "summary.txt", "checkpoints/after_task01/model.safetensors",
                   "merged_model/config.json", "merged_model/model.safetensors"],
           "model": ["config.json", "model.safetensors"],
           "report": ["report.md", "report.html", "oa_by_method.png", "bwt_radar_order2.png"],
           "cache": ["tiny-0123/config.json"], "data": ["tasks.json"]}.get(kind.name, ["manifest.json", "job.json"])
    for name in own:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(completed_text if name == "results.json" else f"{kind.name} {name}\n")
    if kind.name not in ("cache", "data"):  # a cache and a data folder carry no marker
        marker = {"kind": kind.name, "command": WRITTEN_BY.get(kind.name, kind.name), "version": jumplora.__version__,
                  "files": own}
        if kind.name not in WRITTEN_BY:  # a Ray job's folder
            marker["job"] = ownership.job_digest(job or {"run": {"seed": 7}})
        (folder / ownership.MARKER).write_text(json.dumps(marker))
    return folder


WRITTEN_BY = {"run": "jumplora run", "model": "jumplora run --save-model", "report": "jumplora report"}
completed_text = json.dumps({"method": "inclora", "order": 1, "seed": 42, "oa": 0.5, "bwt": -0.1})


def link_to(target: Path, at: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target, target_is_directory=True)
    return at


def target_case(case: str, kind: ownership.Kind, tmp_path: Path, at: Path) -> Path:
    """The target `case` at the path `at` (returned: the path the line names)."""
    elsewhere = tmp_path / "elsewhere"
    if case == "a finished artifact of another command":
        return finished(kind, at)
    if case == "a folder of user files":
        return foreign(at)
    if case == "a file":
        at.parent.mkdir(parents=True, exist_ok=True)
        at.write_text("the user's\n")
        return at
    if case == "a user's file inside a finished artifact":
        (finished(kind, at) / "mine.txt").write_text("the user's\n")
        return at
    if case == "a parent that is a file":  # as read-only as a parent gets for root too: ENOTDIR
        at.parent.parent.mkdir(parents=True, exist_ok=True)
        at.parent.write_text("the user's\n")
        return at.parent
    if case == "a read-only parent":  # chmod 555: root writes there anyway (skipped)
        at.parent.mkdir(parents=True, exist_ok=True)
        (at.parent / "kept.txt").write_text("the user's\n")
        at.parent.chmod(0o555)
        return at.parent
    if case == "a symbolic link to an empty folder":
        elsewhere.mkdir()
    elif case == "a symbolic link to a folder of user files":
        foreign(elsewhere)
    else:
        finished(kind, elsewhere)
    return link_to(elsewhere, at)


TARGETS = ["a finished artifact of another command", "a folder of user files", "a file",
           "a symbolic link to a finished artifact", "a symbolic link to a folder of user files",
           "a symbolic link to an empty folder", "a user's file inside a finished artifact", "a parent that is a file",
           "a read-only parent"]


def arguments(name: str, option: str, parser, needed: list[str], tmp_path: Path, case: str,
              overwrite: bool = True) -> tuple[Path, list[str]]:
    """The target `case` made for the writing option `option`, and the command's arguments; returns (the path a
    refusal must name, the arguments). `overwrite`: `--overwrite` where the command has one, the strongest request to
    replace."""
    storage = option == "--storage-path"
    at = tmp_path / ("storage" if storage else "place") / "mine"
    named = target_case(case, kind_of(parser, option), tmp_path, at)
    given = ["--storage-path", str(at.parent), "--name", at.name] if storage else [option, str(at)]
    if name.endswith(".py") and not storage:  # the job's own folder: new, under tmp_path
        (tmp_path / "storage").mkdir()
        given += ["--storage-path", str(tmp_path / "storage")]
    if name == "run" and option != "--out":  # the run directory: new, under tmp_path
        given += ["--out", str(tmp_path / "new")]
    if overwrite and has_overwrite(parser):
        given.append(ownership.OVERWRITE)
    return named, [str(source_run(tmp_path / "source", 0.5)) if arg == SOURCE else arg for arg in needed] + given


@pytest.mark.parametrize("case", TARGETS[1:])
@pytest.mark.parametrize(("name", "option", "run", "needed", "parser"), WRITERS, ids=IDS)
def test_a_writing_option_replaces_or_deletes_nothing_it_did_not_write(name, option, run, needed, parser, case,
                                                                      tmp_path, capsys):
    """Every writing option of every command, against each target but a finished artifact of its own kind (the next
    test), with `--overwrite` where the command has one: refused in one line naming the target before any work, and
    every file, reached through links too, hashed the same before and after."""
    if case == "a read-only parent" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: 'a parent that is a file' is the case that holds for root")
    named, argv = arguments(name, option, parser, needed, tmp_path, case)
    before = hashed(tmp_path)
    code = run(argv)
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and str(named) in err[0] and REACHED not in err[0], err
    assert hashed(tmp_path) == before


def finished_line(name: str, option: str, folder: Path) -> str:
    """What each option says of a finished artifact of its own kind that another command wrote, written out."""
    jumplora = prefix(name)
    return {
        ("run", "--out"): f"{jumplora}--out {folder} already holds a completed run (written by `jumplora run`): pass "
                          "--overwrite to replace it once the new one is complete, or another --out",
        ("run", "--save-model"): f"{jumplora}--save-model {folder} already holds a saved model (written by `jumplora "
                                 "run --save-model`): pass --overwrite to replace it once the new one is complete, or "
                                 "another --save-model",
        ("report", "--out"): f"{jumplora}--out {folder} already holds a report (written by `jumplora report`): pass "
                             "--overwrite to replace it once the new one is complete, or another --out",
        ("data build", "--out"): f"{jumplora}argument --out: {folder} exists already: pass a path that does not exist "
                                 "yet",
        **{(script, "--storage-path"): f"error: --storage-path/--name {folder} holds a {script} folder of another "
                                       f"configuration (written by `{script}`): a job's folder is resumed by the same "
                                       "job only, never replaced; pass another --name"
           for script in ("grid_lambda.py", "train_sequence.py", "reproduce.py")},
    }.get((name, option), f"{prefix(name)}{REACHED}")  # a cache: added to


def prefix(name: str) -> str:
    """How an entry point begins its one line of error."""
    return "error: " if name.endswith(".py") else "jumplora: error: "


@pytest.mark.parametrize("overwrite", [False, True], ids=["as it is", "--overwrite"])
@pytest.mark.parametrize(("name", "option", "run", "needed", "parser"), WRITERS, ids=IDS)
def test_a_finished_artifact_of_another_command_is_replaced_only_with_overwrite(name, option, run, needed, parser,
                                                                                overwrite, tmp_path, capsys):
    """The rule of every writing option: a finished artifact of its own kind that another command wrote is refused
    in one line (a cache is added to: the work begins, the cache as it was); with `--overwrite`, a run's and a model's
    work begins with the old one in place (swapped out only once the new one is complete), and a report is replaced
    whole. A command without `--overwrite` (a job's folder, `data build`) refuses it either way."""
    named, argv = arguments(name, option, parser, needed, tmp_path, "a finished artifact of another command",
                            overwrite)
    before = hashed(tmp_path)
    code = run(argv)
    err = [re.sub(r" \(see `[^`]+ --help`\)$", "", line) for line in capsys.readouterr().err.splitlines()]
    kind = kind_of(parser, option)
    if overwrite and kind is ownership.REPORT:  # replaced whole by the report of the source run
        assert (code, err) == (0, [])
        assert sorted(p.name for p in named.parent.iterdir()) == ["mine"]  # nothing left beside
        new = ownership.read_owner(ownership.LocalFolder(named))
        assert new.command == "jumplora report"
        assert {"report.md", "report.html", "oa_by_method.png"} <= set(new.files)
        assert "bwt_radar_order2.png" not in new.files  # of the old report only: gone with it
        assert set(new.files) == set(ownership.LocalFolder(named).files()) - {ownership.MARKER}
        assert (named / "report.md").read_text().startswith("# JumpLoRA report\n")  # not "report report.md"
        return
    expected = f"{prefix(name)}{REACHED}" if overwrite and kind.finished is not None \
        else finished_line(name, option, named)
    assert (code, err) == (2, [expected])
    assert hashed(tmp_path) == before


def test_a_saved_model_of_its_own_is_replaced_whole(tmp_path):
    """`--save-model --overwrite` over a model it saved before: the new one is written aside and swapped in; nothing of
    the old one stays, nothing is left beside it."""
    from jumplora.cli_run import save_model

    model = finished(ownership.MODEL, tmp_path / "model")
    (model / "old-weights.bin").write_text("old")
    ownership.seal(model, ownership.MODEL, "jumplora run --save-model")
    save_model(saving_workspace(), model, "--save-model", True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in model.iterdir()) == sorted([ownership.MARKER, "model.safetensors", "tokenizer.json"])
    assert ownership.read_owner(ownership.LocalFolder(model)).kind == "model"


def saving_workspace(before_the_swap=lambda: None):
    """A workspace whose model and tokenizer save one file each (`before_the_swap` runs as the tokenizer saves)."""
    from types import SimpleNamespace

    def saver(name, then=lambda: None):
        return SimpleNamespace(save_pretrained=lambda where: ((where / name).write_text("new"), then()))

    return SimpleNamespace(model=saver("model.safetensors"), tokenizer=saver("tokenizer.json", before_the_swap))


def test_a_model_finished_by_another_command_while_this_one_saved_is_kept(tmp_path):
    """Checked again when the new model is put in place: one another command finished there meanwhile is kept, and
    nothing is left beside it."""
    from jumplora.cli_run import save_model

    model = tmp_path / "model"
    ownership.check_run(tmp_path / "run", model, tmp_path / "cache")  # up front: nothing there yet
    with pytest.raises(JumpLoRAError) as refusal:
        save_model(saving_workspace(lambda: finished(ownership.MODEL, model)), model, "--save-model", False)
    assert str(refusal.value) == (f"--save-model {model} already holds a saved model (written by `jumplora run "
                                  "--save-model`): pass --overwrite to replace it once the new one is complete, or "
                                  "another --save-model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(ownership.LocalFolder(model).files()) == [ownership.MARKER, "config.json", "model.safetensors"]
    assert (model / "config.json").read_text() == "model config.json\n"


def test_a_job_folder_is_its_scripts_own_and_its_jobs(tmp_path, capsys):
    """A grid's folder resumes as that grid's; another grid, another script, or a run directory inside it, is refused;
    a file at its place too."""
    from jumplora.storage import GRID, SEQUENCE, Storage

    storage, cache, job = Storage(str(tmp_path / "storage")), str(tmp_path / "cache"), {"run": {"seed": 42}}
    storage.check_own("demo", GRID, cache, job)
    assert not (tmp_path / "storage" / "demo").exists()  # checked only: marked once the job's requests fit
    storage.mark("demo", GRID, job)
    (tmp_path / "storage" / "demo" / "manifest.json").write_text("{}")
    storage.seal("demo", GRID)
    assert ownership.read_owner(storage.child("demo")).job == ownership.job_digest(job)  # kept by the seal
    storage.check_own("demo", GRID, cache, {"run": {"seed": 42}})  # resubmitted: its own
    folder = tmp_path / "storage" / "demo"
    with pytest.raises(JumpLoRAError, match=re.escape(
            f"--storage-path/--name {folder} holds a grid_lambda.py folder of another configuration (written by "
            "`grid_lambda.py`): a job's folder is resumed by the same job only, never replaced; pass another --name")):
        storage.check_own("demo", GRID, cache, {"run": {"seed": 43}})
    with pytest.raises(JumpLoRAError, match=re.escape(
            f"--storage-path/--name {folder} holds a grid_lambda.py folder (written by `grid_lambda.py`), not a "
            "train_sequence.py folder: pass another directory")):
        storage.check_own("demo", SEQUENCE, cache, job)
    out = folder / "run"
    line = refused(run_argv("--out", str(out)), capsys)
    assert line == (f"jumplora: error: --out {out} lies inside a grid_lambda.py folder written by `grid_lambda.py` "
                    f"({folder}): pass a directory outside it")
    assert not out.exists()
    (tmp_path / "storage" / "file").write_text("the user's\n")
    with pytest.raises(JumpLoRAError, match=re.escape(f"--storage-path/--name {tmp_path / 'storage' / 'file'} is a "
                                                      "file: pass another --name")):
        storage.check_own("file", GRID, cache, job)


def test_a_job_folder_marked_before_digests_is_left_to_the_jobs_own_record(tmp_path):
    """A folder marked without the job's digest (this product before them) is not refused up front (its manifest or
    job.json refuses another job later), and marking it again does not give it this job's digest."""
    from jumplora.storage import SWEEP, Storage

    storage = Storage(str(tmp_path / "storage"))
    (tmp_path / "storage" / "sweep").mkdir(parents=True)
    (tmp_path / "storage" / "sweep" / ownership.MARKER).write_text(ownership.Owner.mark(SWEEP, "reproduce.py"))
    storage.check_own("sweep", SWEEP, str(tmp_path / "cache"), {"benchmark": "sc"})
    storage.mark("sweep", SWEEP, {"benchmark": "sc"})
    assert ownership.read_owner(storage.child("sweep")).job is None


# --- ownership at the level of files (a sealed marker lists what the product wrote) and symbolic links

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
                                       ownership.MARKER: ownership.Owner.mark(ownership.RUN, "jumplora run",
                                                                              []).encode()}
    assert capsys.readouterr().err == (f"warning: {replaced_dir(old)} keeps late.txt, which jumplora did not write "
                                       f"(added to {old} while it ran): move what you need and delete the folder\n")
    with pytest.raises(JumpLoRAError, match=re.escape(f"{replaced_dir(old)} (where jumplora keeps the old run during "
                                                      f"an --overwrite swap of --out {old}) is a run directory of "
                                                      "jumplora's, but holds late.txt")):  # the next run: refused
        ownership.check_run(old, None, tmp_path / "cache", overwrite=True)
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
    ownership.check(run, ownership.RUN, "--out", overwrite=True)  # its own files only: not refused
    (run / "thesis.tex").write_text("draft\n")
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert "holds thesis.tex, which jumplora did not write" in line
    assert {k: v for k, v in hashed(tmp_path).items() if k != "run/thesis.tex"} == before
