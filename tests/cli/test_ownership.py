"""Rule 1, the product writes and deletes only what it recorded writing: every writing option of every command,
pointed at a target that is not its to write (a folder of user files whatever they are called, a file, a symbolic
link, a parent it cannot write in, a user's file inside a finished artifact, a product file the user changed, a
record edited to name a path outside the folder or a directory), is refused in one line naming what it found, before
any work, never inviting `--overwrite`, and leaves every file byte-identical; a finished artifact that another
command wrote is replaced only with `--overwrite`, and only once the new one is complete; the targets of one command
lie apart; what a command keeps beside its target is checked up front. None of these loads data or a model: the work
is stubbed where it begins (`Reached`). The writer itself (`ownership.Target`): tests/test_ownership.py."""

from __future__ import annotations

import argparse
import contextlib
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
from jumplora.ownership.checks import OVERWRITE, replaced_dir
from jumplora.ownership.folders import LocalFolder, Owner, job_digest, read_owner


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
    """A run directory as a version before markers wrote it (no record): a results.json of the schema read today."""
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
    assert line == (f"jumplora: error: --out {d} holds files jumplora did not write (thesis.tex): jumplora writes "
                    "only into a new or empty directory or one whose files it recorded writing; pass a new or empty "
                    "directory, or move them out")
    assert tree(tmp_path) == {"d": None, "d/thesis.tex": b"draft\n"}  # no staging, no lock


def test_save_model_into_a_completed_run_directory_is_refused(tmp_path, capsys):
    run = completed_run(tmp_path / "run")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(run)), capsys)
    assert line == (f"jumplora: error: --save-model {run} holds files jumplora did not write (results.json, "
                    "summary.txt): jumplora writes only into a new or empty directory or one whose files it recorded "
                    "writing; pass a new or empty directory, or move them out")  # not recognised by its names
    assert tree(tmp_path) == before
    finished(ownership.RUN, tmp_path / "recorded")  # a run directory recorded by this version
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(tmp_path / "recorded")), capsys)
    assert line == f"jumplora: error: --save-model {tmp_path / 'recorded'} holds a run directory (written by " \
                   "`jumplora run`), not a saved model: pass another directory"
    assert tree(tmp_path) == before


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
    run = finished(ownership.RUN, tmp_path / "run")
    staging = tmp_path / ".run.staging"
    staging.write_text("mine")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {run}: {staging}, where jumplora keeps a run directory while it is "
                    "written aside, is not a directory jumplora wrote: move it away or pass another directory")
    assert tree(tmp_path) == before


def test_a_staging_folder_of_someone_else_is_refused(tmp_path, capsys):
    run = finished(ownership.RUN, tmp_path / "run")
    foreign(tmp_path / ".run.staging")
    before = tree(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line.startswith(f"jumplora: error: {tmp_path / '.run.staging'} (where jumplora keeps a run directory while "
                           f"it is written aside of --out {run}) holds files jumplora did not write (notes/todo.txt, "
                           "thesis.tex)")
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
    assert line.startswith(f"jumplora: error: --out {folder} holds files jumplora did not write (notes/todo.txt, "
                           "thesis.tex)")
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
    from ray_jobs import cli, grid_lambda, reproduce, train_sequence

    needed = {("run",): ["--quiet", "--no-tracking"], ("report",): [SOURCE], ("data", "build"): []}
    for words, parser in jumplora_commands(build_parser()):
        yield " ".join(words), lambda argv, w=words: main([*w, *argv]), parser, needed.get(words, [])
    smoke = ["--preset", "smoke", "--no-tracking", "--max-tasks", "2"]
    for module, args in ((grid_lambda, ["--order", "1"]), (train_sequence, []),
                         (reproduce, ["--methods", "inclora", "--orders", "1", "--seeds", "1"])):
        yield module.build_parser().prog, lambda argv, m=module: cli.run_main(m.SCRIPT, argv), module.build_parser(), \
            [*args, *smoke]


WRITERS = [(name, action.option_strings[0], run, needed, parser) for name, run, parser, needed in entry_points()
           for action in parser._actions if hasattr(action, "writes")]
IDS = [f"{name} {option}" for name, option, *_ in WRITERS]


def kind_of(parser: argparse.ArgumentParser, option: str) -> ownership.Kind:
    return next(action.writes for action in parser._actions if option in action.option_strings)


def has_overwrite(parser: argparse.ArgumentParser) -> bool:
    return any(OVERWRITE in action.option_strings for action in parser._actions)


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
    helps = {name: next((action.help for action in parser._actions if OVERWRITE in action.option_strings),
                        None) for name, _, parser, _ in entry_points()}
    common = ("the new one is written aside and takes its place only once complete (deleting only the files "
              "jumplora recorded writing there, unchanged)")
    assert helps["run"] == (f"replace what an earlier command finished at --out, --save-model: {common}; a run cut "
                            "off at --out starts over instead of going on")
    assert helps["report"] == f"replace what an earlier command finished at --out: {common}"
    assert {name for name, text in helps.items() if text is not None} == {"run", "report"}


def finished(kind: ownership.Kind, folder: Path, job: dict | None = None) -> Path:
    """A finished artifact of `kind` at `folder`, recorded as its writer records it: each file with its SHA-256, the
    folders it made (a job's folder: marked with the digest of `job`, another configuration than the tests' by
    default, and no record: Ray writes there too)."""
    own = {"run": ["results.json", "summary.txt", "checkpoints/after_task01/model.safetensors",
                   "merged_model/config.json", "merged_model/model.safetensors"],
           "model": ["config.json", "model.safetensors"],
           "report": ["report.md", "report.html", "oa_by_method.png", "bwt_radar_order2.png"],
           "cache": ["tiny-0123/config.json"], "data": ["tasks.json"]}.get(kind.name, ["manifest.json", "job.json"])
    for name in own:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(completed_text if name == "results.json" else f"{kind.name} {name}\n")
    if kind.name == "cache":  # a cache carries no marker
        return folder
    if kind.records:
        dirs = {str(Path(name).parent) for name in own} - {"."}
        dirs |= {str(Path(name).parent) for name in dirs} - {"."}
        owner = Owner(kind.name, WRITTEN_BY.get(kind.name, kind.name),
                                files={name: sha256(folder / name) for name in own}, dirs=tuple(dirs))
    else:  # a Ray job's folder
        digest = job_digest(job or {"run": {"seed": 7}})
        owner = Owner(kind.name, kind.name, files=None, job=digest)
    (folder / ownership.MARKER).write_text(owner.text())
    return folder


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


WRITTEN_BY = {"run": "jumplora run", "model": "jumplora run --save-model", "report": "jumplora report",
              "data": "jumplora data build"}
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
    if case in UNRECORDED:  # user files of names the product writes too, or none at all
        for name, text in UNRECORDED[case].items():  # text None: a folder
            (at / name).mkdir(parents=True) if text is None else (at / name).parent.mkdir(parents=True, exist_ok=True)
            if text is not None:
                (at / name).write_text(text)
        return at
    if case in RECORD_CASES:
        return record_case(case, kind, tmp_path, finished(kind, at))
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


# a folder of the user's that the product once took for its own by the names it holds; what the line names in it
UNRECORDED = {"photos": {"holiday.png": "jpeg\n", "beach.png": "jpeg\n"},
              "a report of the user's": {"report.md": "# my report\n", "report.html": "<p>mine</p>\n"},
              "an empty sub-folder": {"empty": None},
              "a hidden .X.tmp folder": {".backup.tmp/key.txt": "secret\n"}}
SHOWN_AS = {"photos": "beach.png", "a report of the user's": "report.md", "an empty sub-folder": "empty/",
            "a hidden .X.tmp folder": ".backup.tmp/key.txt"}
RECORD_CASES = ["a product file the user changed", "a record naming ../x", "a record naming an absolute path",
                "a record naming a directory"]


def record_case(case: str, kind: ownership.Kind, tmp_path: Path, folder: Path) -> Path:
    """A finished artifact whose recorded file the user changed, or whose record names a path outside it or a folder
    of the user's (a job's folder and a cache keep no record: as finished)."""
    if not kind.records:
        return folder
    marker = json.loads((folder / ownership.MARKER).read_text())
    first = sorted(marker["record"])[0]
    if case == "a product file the user changed":
        (folder / first).write_text("the user's edit\n")
        return folder
    outside = tmp_path / "x"
    outside.write_text("the user's, beside\n")
    if case == "a record naming a directory":
        foreign(folder)  # notes/todo.txt
        marker["record"]["notes"] = "0" * 64
    else:
        marker["record"]["../x" if case == "a record naming ../x" else str(outside)] = sha256(outside)
    (folder / ownership.MARKER).write_text(json.dumps(marker))
    return folder


TARGETS = ["a finished artifact of another command", "a folder of user files", "a file",
           "a symbolic link to a finished artifact", "a symbolic link to a folder of user files",
           "a symbolic link to an empty folder", "a user's file inside a finished artifact", "a parent that is a file",
           "a read-only parent", *UNRECORDED, *RECORD_CASES]


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
        given.append(OVERWRITE)
    return named, [str(source_run(tmp_path / "source", 0.5)) if arg == SOURCE else arg for arg in needed] + given


@pytest.mark.parametrize("case", TARGETS[1:])
@pytest.mark.parametrize(("name", "option", "run", "needed", "parser"), WRITERS, ids=IDS)
def test_a_writing_option_replaces_or_deletes_nothing_it_did_not_write(name, option, run, needed, parser, case,
                                                                      tmp_path, capsys):
    """Every writing option of every command, against each target but a finished artifact of its own kind (the next
    test), with `--overwrite` where the command has one: refused in one line naming the target (and, in a folder of
    the user's, what it holds) before any work, never asking for `--overwrite`, and every file, reached through links
    too, hashed the same before and after. A cache keeps no record: one whose entries are the product's is added to,
    left as it was."""
    if case == "a read-only parent" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: 'a parent that is a file' is the case that holds for root")
    named, argv = arguments(name, option, parser, needed, tmp_path, case)
    before = hashed(tmp_path)
    code = run(argv)
    err = [re.sub(r" \(see `[^`]+ --help`\)$", "", line) for line in capsys.readouterr().err.splitlines()]
    assert hashed(tmp_path) == before
    if kind_of(parser, option) is ownership.CACHE and case in RECORD_CASES:
        assert (code, err) == (2, [f"{prefix(name)}{REACHED}"])
        return
    assert code == 2 and len(err) == 1 and str(named) in err[0] and REACHED not in err[0], err
    assert OVERWRITE not in err[0]
    if case in SHOWN_AS and name != "data build":  # data build takes only a path that does not exist
        assert SHOWN_AS[case] in err[0]


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
        new = read_owner(LocalFolder(named))
        assert new.command == "jumplora report"
        assert {"report.md", "report.html", "oa_by_method.png"} <= set(new.files)
        assert "bwt_radar_order2.png" not in new.files  # of the old report only: gone with it
        assert set(new.files) == set(LocalFolder(named).files()) - {ownership.MARKER}
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

    model = tmp_path / "model"
    (model / "old-weights.bin").parent.mkdir()
    (model / "old-weights.bin").write_text("old")
    finished(ownership.MODEL, model)
    record = json.loads((model / ownership.MARKER).read_text())
    record["record"]["old-weights.bin"] = sha256(model / "old-weights.bin")  # written by that earlier save too
    (model / ownership.MARKER).write_text(json.dumps(record))
    save_model(saving_workspace(), model, "--save-model", True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in model.iterdir()) == sorted([ownership.MARKER, "model.safetensors", "tokenizer.json"])
    assert read_owner(LocalFolder(model)).kind == "model"


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
    assert sorted(LocalFolder(model).files()) == [ownership.MARKER, "config.json", "model.safetensors"]
    assert (model / "config.json").read_text() == "model config.json\n"


def test_a_job_folder_is_its_scripts_own_and_its_jobs(tmp_path, capsys, monkeypatch):
    """A grid's folder resumes as that grid's; another grid, another script, or a run directory inside it, is refused;
    a file at its place too."""
    from jumplora.storage import GRID, SEQUENCE, Storage

    monkeypatch.setattr(Storage, "lock", lambda self, name, command: contextlib.nullcontext())  # held: marked

    storage, cache, job = Storage(str(tmp_path / "storage")), str(tmp_path / "cache"), {"run": {"seed": 42}}
    held = storage.job("demo", GRID, cache, job)
    assert not (tmp_path / "storage" / "demo").exists()  # checked only: marked once the job's requests fit
    with held.held():
        pass
    (tmp_path / "storage" / "demo" / "manifest.json").write_text("{}")
    assert read_owner(storage.child("demo")).job == job_digest(job)
    storage.job("demo", GRID, cache, {"run": {"seed": 42}})  # resubmitted: its own
    folder = tmp_path / "storage" / "demo"
    with pytest.raises(JumpLoRAError, match=re.escape(
            f"--storage-path/--name {folder} holds a grid_lambda.py folder of another configuration (written by "
            "`grid_lambda.py`): a job's folder is resumed by the same job only, never replaced; pass another --name")):
        storage.job("demo", GRID, cache, {"run": {"seed": 43}})
    with pytest.raises(JumpLoRAError, match=re.escape(
            f"--storage-path/--name {folder} holds a grid_lambda.py folder (written by `grid_lambda.py`), not a "
            "train_sequence.py folder: pass another directory")):
        storage.job("demo", SEQUENCE, cache, job)
    out = folder / "run"
    line = refused(run_argv("--out", str(out)), capsys)
    assert line == (f"jumplora: error: --out {out} lies inside a grid_lambda.py folder written by `grid_lambda.py` "
                    f"({folder}): pass a directory outside it")
    assert not out.exists()
    (tmp_path / "storage" / "file").write_text("the user's\n")
    with pytest.raises(JumpLoRAError, match=re.escape(f"--storage-path/--name {tmp_path / 'storage' / 'file'} is a "
                                                      "file: pass another --name")):
        storage.job("file", GRID, cache, job)


@pytest.mark.parametrize("digest", [None, job_digest({"benchmark": "sc"})])
def test_a_job_folder_of_a_version_before_records_is_read_never_resumed(tmp_path, digest):
    """A job's folder whose marker is in no record (written before records were kept, with or without the job's
    digest) is refused up front in one line: resuming would rewrite its manifest and tables, which no record names, so
    the job would stop after training a stage. Nothing there changes."""
    from jumplora.storage import SWEEP, Storage

    folder = tmp_path / "storage" / "sweep"
    folder.mkdir(parents=True)
    (folder / ownership.MARKER).write_text(Owner(SWEEP.name, "reproduce.py", files=None, job=digest).text())
    (folder / "oa.csv").write_text("the old sweep's table\n")
    before = hashed(tmp_path)
    with pytest.raises(JumpLoRAError) as refused:
        Storage(str(tmp_path / "storage")).job("sweep", SWEEP, str(tmp_path / "cache"), {"benchmark": "sc"})
    assert str(refused.value) == (
        f"--storage-path/--name {folder} holds a reproduce.py folder that a version of jumplora before records wrote "
        "(or whose marker changed since): `jumplora report` and `jumplora track` read it, but a job does not resume "
        "or rewrite it; pass another --name")
    assert hashed(tmp_path) == before


# --- ownership at the level of files (the record names what the product wrote, with its hash) and symbolic links

def test_overwrite_of_a_run_with_a_file_of_the_users_is_refused_and_the_file_survives(tmp_path, capsys):
    """The first case of the issue: `run --overwrite` on a finished run to which the user added a file."""
    run = finished(ownership.RUN, tmp_path / "run")
    (run / "analysis.ipynb").write_text("my notebook\n")
    before = hashed(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {run} is a run directory of jumplora's, but holds analysis.ipynb, which "
                    "jumplora did not write: move it out (jumplora deletes only what it wrote, unchanged) or pass "
                    "another directory")
    assert hashed(tmp_path) == before


def test_a_later_save_into_a_model_with_a_file_of_the_users_is_refused(tmp_path, capsys):
    """The second case: a later run's `--save-model` into a saved model to which the user added a file."""
    model = finished(ownership.MODEL, tmp_path / "model")
    (model / "notes").mkdir()
    (model / "notes" / "eval.txt").write_text("mine\n")
    before = hashed(tmp_path)
    line = refused(run_argv("--out", str(tmp_path / "new"), "--save-model", str(model)), capsys)
    assert line == (f"jumplora: error: --save-model {model} is a saved model of jumplora's, but holds notes/eval.txt, "
                    "which jumplora did not write: move it out (jumplora deletes only what it wrote, unchanged) or "
                    "pass another directory")
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
    """A file added to a run while its `--overwrite` ran (after the check) stays, in the old folder, with a line; so
    does a file of the old run that the user changed meanwhile. The next `--overwrite` is refused, naming them."""
    old = finished(ownership.RUN, tmp_path / "run")
    with ownership.Target(old, ownership.RUN, "jumplora run", "--out", overwrite=True) as target:
        ownership.write_text(target.path / "summary.txt", "the new run\n")
        ownership.write_text(target.path / "results.json", completed_text)
        (old / "late.txt").write_text("added while the new run trained\n")
        (old / "summary.txt").write_text("edited while the new run trained\n")
    assert (old / "summary.txt").read_text() == "the new run\n"
    replaced = replaced_dir(old)
    assert {k: v for k, v in tree(replaced).items() if k != ownership.MARKER} == {
        "late.txt": b"added while the new run trained\n", "summary.txt": b"edited while the new run trained\n"}
    assert capsys.readouterr().err == (f"warning: {replaced} keeps late.txt, summary.txt, which jumplora did not "
                                       f"write or which changed since it wrote them (in {old} while it was replaced): "
                                       "move "
                                       "what you need and delete the folder\n")
    with pytest.raises(JumpLoRAError, match=re.escape(f"{replaced} (where jumplora keeps the old run directory during "
                                                      f"a swap of --out {old}) is a run directory of jumplora's, but "
                                                      "holds late.txt, which jumplora did not write; summary.txt "
                                                      "changed since jumplora wrote it")):
        ownership.check_run(old, None, tmp_path / "cache", overwrite=True)
    (replaced / "late.txt").unlink()  # moved away by the user: the next swap takes the old folder whole
    (replaced / "summary.txt").unlink()
    with ownership.Target(old, ownership.RUN, "jumplora run", "--out", overwrite=True) as target:
        ownership.write_text(target.path / "results.json", completed_text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(LocalFolder(old).files()) == [ownership.MARKER, "results.json"]


def test_a_run_marked_before_records_is_read_but_never_replaced(tmp_path, capsys):
    """A marker of a version that listed no hashes (or no files): not the product's to replace or delete, whatever its
    files are called; `jumplora report` still reads the run, and a run it cut off is resumed."""
    run = completed_run(tmp_path / "run")
    (run / ownership.MARKER).write_text(json.dumps({"kind": "run", "command": "jumplora run", "version": "0.9",
                                                    "files": ["results.json", "summary.txt"]}))
    before = hashed(tmp_path)
    line = refused(run_argv("--out", str(run), "--overwrite"), capsys)
    assert line == (f"jumplora: error: --out {run} is a run directory written by a version of jumplora that did not "
                    "record its files: it is read (report, track, eval, a resume) but never replaced; pass a new or "
                    "empty directory")
    assert hashed(tmp_path) == before
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    capsys.readouterr()
    assert {k: v for k, v in hashed(tmp_path).items() if not k.startswith("report")} == before
    (run / "results.json").unlink()  # a run that version cut off: resumed in place (its files never deleted)
    assert main(run_argv("--out", str(run))) == 2 and capsys.readouterr().err == f"jumplora: error: {REACHED}\n"
