"""Every option of every command, enumerated from the parsers, fed the generic bad values of its kind (numbers: −1, 0,
a huge int, 1e308, nan, inf, a word; paths: a file, a folder, a missing parent, an unwritable place, and what the
operating system refuses: a name over 255 bytes, a path over 4096, a parent that may not be read; URIs: an unknown
scheme, a mistyped sqlite path, one no URL parser reads; lists: an empty field, a duplicate; ...): each is refused
where the arguments are parsed, in one line naming the option, exit 2, no traceback, nothing written. A value valid
for the option is skipped by the option's own metadata (its `jumplora.kinds` kind: range, what a path must be),
computed here from those facts; an option without a kind or choices fails the test. An argument no command knows is
refused by the command given it, pointing to its own help. In-process (parsing only, no model: the commands are
stubbed), plus every script a user runs once each, for its boundary (`errors.entry_point`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jumplora import cli, kinds
from jumplora.kinds import FOLDER, NEW, WRITABLE, Device, Items, Kind, ModelName, Name, Number, PathKind, Text, Uri
from jumplora.tracking import __main__ as store_check
from ray_jobs import grid_lambda, reproduce, train_sequence
from ray_jobs.cli import Script, run_main

REPO = Path(__file__).resolve().parents[2]
RAY_SCRIPTS = {"grid_lambda.py": grid_lambda.build_parser, "train_sequence.py": train_sequence.build_parser,
               "reproduce.py": reproduce.build_parser}


def leaf_parsers(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(the subcommand's words, its parser) of every command below `parser`."""
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from leaf_parsers(child, (*words, name))


def commands() -> dict[str, tuple[tuple[str, ...], object]]:
    """command name → (its words, a function building its parser), for `jumplora`'s subcommands and the Ray scripts."""
    found = {" ".join(("jumplora", *words)): (words, "jumplora") for words, _ in leaf_parsers(cli.build_parser())}
    return {**found, **{name: ((), name) for name in RAY_SCRIPTS}}


def parser_of(command: str) -> argparse.ArgumentParser:
    words, builder = COMMANDS[command]
    if builder == "jumplora":
        return dict(leaf_parsers(cli.build_parser()))[words]
    return RAY_SCRIPTS[builder]()


COMMANDS = commands()


def valued_actions(command: str) -> list[argparse.Action]:
    return [action for action in parser_of(command)._actions
            if action.nargs != 0 and not isinstance(action, argparse._SubParsersAction)]


OPTIONS = [(command, action.dest) for command in COMMANDS for action in valued_actions(command)]


# every file a user runs (`python -m`, a script the README or the Makefile names), each inside the one boundary
SCRIPTS = {"jumplora/__main__.py": "main()", "jumplora/cli.py": "entry_point(",
           "jumplora/tracking/__main__.py": "entry_point(", "examples/forgetting.py": "entry_point(",
           **{f"ray_jobs/{name}": "run_main(SCRIPT)" for name in RAY_SCRIPTS}}


def test_the_commands_are_every_entry_point():
    assert set(COMMANDS) == {"jumplora run", "jumplora orders", "jumplora data check", "jumplora data build",
                             "jumplora eval", "jumplora report", "jumplora track", *RAY_SCRIPTS}
    found = {str(path.relative_to(REPO)): path.read_text() for folder in ("jumplora", "ray_jobs", "examples")
             for path in (REPO / folder).rglob("*.py")
             if path.name == "__main__.py" or 'if __name__ == "__main__":' in path.read_text()}
    assert set(found) == set(SCRIPTS)
    assert all(call in found[script] for script, call in SCRIPTS.items())
    assert len(OPTIONS) > 100


# the generic bad values of each family, built in a folder holding a file and a folder (`made`)
def number_values() -> list[str]:
    return ["-1", "0", str(10**40), "1e308", "-1e308", "nan", "inf", "-inf", "word", "1.5"]


def os_refused(tmp: Path) -> dict[str, str]:
    """Paths the operating system refuses to look at, each with what it says: a name over 255 bytes, a path over
    PATH_MAX (4096), and (not as root, whom permissions do not stop) one under a folder that may not be read."""
    refused = dict.fromkeys([str(tmp / ("x" * 256)), str(tmp.joinpath(*["d" * 200] * 21))], "File name too long")
    if os.geteuid() != 0:
        refused[str(tmp / "unreadable" / "x")] = "Permission denied"
    return refused


def path_values(tmp: Path) -> list[str]:
    return [str(tmp / "a-file"), str(tmp / "a-folder"), str(tmp / "missing" / "x"), str(tmp / "a-file" / "x"),
            "/proc/jumplora-x", "", *os_refused(tmp)]


def uri_values(tmp: Path) -> list[str]:
    return ["nosuch://bucket/x", "sqlite://relative.db", f"sqlite:///{tmp}/missing/mlflow.db",
            f"sqlite:///{tmp}/a-folder", f"sqlite:///{tmp / ('x' * 256)}/mlflow.db", "http://[::1", "http://h:99999",
            "s3://[bucket", *path_values(tmp)]


@contextlib.contextmanager
def made(tmp: Path):
    """`tmp` holding a-file, a-folder with a user's file, and (mode 000) the folder `unreadable`; its mode given back
    after, so that the folder can be removed."""
    (tmp / "a-file").write_text("keep")
    (tmp / "a-folder").mkdir()
    (tmp / "a-folder" / "thesis.tex").write_text("draft")
    (tmp / "unreadable").mkdir(mode=0)
    try:
        yield tmp
    finally:
        (tmp / "unreadable").chmod(0o755)


def valid_number(kind: Number, text: str) -> bool:
    """From the kind's declared range, independently of its parser."""
    if text in kind.words:
        return True
    try:
        value = int(text) if kind.whole else float(text)
    except ValueError:
        return False
    if not math.isfinite(value) or not kind.lowest <= value <= kind.highest:
        return False
    return not ((kind.low_open and value == kind.low) or (kind.high_open and value == kind.high))


def valid_path(kind: PathKind, text: str, tmp: Path) -> bool:
    """What each `must` admits among `path_values`: a folder to write may be made with its parents."""
    if text in kind.words:
        return True
    admitted = {FOLDER: {tmp / "a-folder"}, NEW: {tmp / "missing" / "x"},
                WRITABLE: {tmp / "a-folder", tmp / "missing" / "x"}}[kind.must]
    return bool(text) and Path(text) in admitted


def valid_uri(text: str, tmp: Path) -> bool:
    return "://" not in text and not text.startswith("sqlite:") and valid_path(PathKind(WRITABLE), text, tmp)


def valid_device(text: str) -> bool:
    if text in ("auto", "cpu"):
        return True
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return text == "cuda" and count > 0 or text.startswith("cuda:") and text[5:].isdigit() and int(text[5:]) < count


def example(kind: Kind | None, choices, tmp: Path) -> str:
    """A value the option takes."""
    if choices:
        return str(next(iter(choices)))
    if isinstance(kind, Number):
        return next(text for text in ("1", "2", "0.5", "0", "42") if valid_number(kind, text))
    if isinstance(kind, PathKind):
        return str(tmp / "a-folder" if kind.must == FOLDER else tmp / "new")
    if isinstance(kind, Items):
        return kind.example
    return {Uri: str(tmp / "store"), Device: "cpu", Text: "x", Name: "x", ModelName: "x"}[type(kind)]


def bad_values(kind: Kind | None, choices, tmp: Path) -> list[str]:
    """The generic bad values of the option's kind, less those its metadata says it takes."""
    return (["no-such-choice"] if choices else []) + (kind_values(kind, tmp) if kind is not None else [""])


def kind_values(kind: Kind, tmp: Path) -> list[str]:
    if isinstance(kind, Number):
        return [text for text in number_values() if not valid_number(kind, text)]
    if isinstance(kind, PathKind):  # a URI it takes in place of a path names something after its prefix
        return [text for text in [*path_values(tmp), *kind.uris] if not valid_path(kind, text, tmp)]
    if isinstance(kind, Uri):
        return [text for text in uri_values(tmp) if not valid_uri(text, tmp)]
    if isinstance(kind, Device):
        return [text for text in ("mps", "gpu", "cuda", "cuda:99", "") if not valid_device(text)]
    if isinstance(kind, Items):
        first = kind.example.split(",")[0]
        items = [f"{first},", f",{first}", f"{first},,{first}", "", " "]
        items += [f"{first},{first}"] if kind.unique else []
        return items + [f"{first},{text}" for text in kind_values(kind.item, tmp) if text.strip()]
    if isinstance(kind, Name):
        return ["", "..", "a/b", ".", "a\nb", "a\tb"] + (["a:b", "..a"] if isinstance(kind, ModelName) else [])
    assert isinstance(kind, Text), kind
    return ["", "  "]


@pytest.fixture
def parsed(monkeypatch, capsys):
    """Parse only, through the command's own boundary (`cli.main` with every command stubbed, `run_main`): the exit
    code and stderr of `argv` (0 when accepted)."""
    for name in cli.COMMANDS:
        monkeypatch.setitem(cli.COMMANDS, name, lambda args: 0)

    def parse(command: str, argv: list[str]) -> tuple[int, str]:
        if command.startswith("jumplora"):
            return cli.main(argv), capsys.readouterr().err
        return run_main(Script(RAY_SCRIPTS[command], lambda args: 0), argv), capsys.readouterr().err

    return parse


def tree(root: Path) -> dict[str, bytes | None]:
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None for path in root.rglob("*")}


def argv_with(command: str, action: argparse.Action | None, value: str, tmp: Path) -> list[str]:
    """`command`'s words, a value the option takes for each of its other required arguments, and `value` given to
    `action` (None: `value` alone, after the others)."""
    actions = valued_actions(command)
    words = COMMANDS[command][0]
    required = [other for other in actions if other is not action and (not other.option_strings or other.required)]
    argv = [*words]
    for other in required:
        shown = example(other.type, other.choices, tmp)
        argv += [shown] if not other.option_strings else [other.option_strings[-1], shown]
    if action is None:
        return [*argv, value]
    if not action.option_strings:  # a positional in its place among the others
        return [*words, value, *argv[len(words):]]
    return [*argv, action.option_strings[-1], value]


@pytest.mark.parametrize(("command", "dest"), OPTIONS, ids=[f"{c}:{d}" for c, d in OPTIONS])
def test_every_bad_value_of_an_option_is_one_line_naming_it(command, dest, tmp_path, parsed, monkeypatch):
    """Before: a path the operating system refused (a name too long, ...) was a traceback from inside argparse."""
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/) land here, where nothing may appear
    action = next(action for action in valued_actions(command) if action.dest == dest)
    assert isinstance(action.type, Kind) or action.choices, f"{command} {dest}: declare its kind (jumplora.kinds)"
    name = action.option_strings[-1] if action.option_strings else action.metavar or action.dest
    with made(tmp_path):
        before = tree(tmp_path)
        values = bad_values(action.type, action.choices, tmp_path)
        assert values, f"{command} {dest}: no bad value of its kind to try"
        for value in values:
            code, err = parsed(command, argv_with(command, action, value, tmp_path))
            assert code == 2, f"{command} {name} {value!r} was accepted"
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
            assert f"argument {name}" in err or f"argument {action.dest}" in err, err
            said = os_refused(tmp_path).get(value)
            assert said is None or f"{value}: {said}: " in err, err  # the path, the system's word for it, the fix
        assert tree(tmp_path) == before and not (tmp_path / "runs").exists()  # byte-identical, no store made


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_argument_points_to_the_help_of_the_command_given_it(command, tmp_path, parsed):
    """Before: `jumplora run --bogus` pointed to `jumplora --help`, which lists no option of `run`."""
    with made(tmp_path):
        code, err = parsed(command, argv_with(command, None, "--no-such-option", tmp_path))
    see = f"`{command} --help`" if command.startswith("jumplora") else f"{command} --help"
    start = "jumplora: error: " if command.startswith("jumplora") else "error: "
    assert (code, err) == (2, f"{start}unrecognized arguments: --no-such-option (see {see})\n")


def test_the_kinds_say_why(tmp_path):
    """The lines the generic values give, as a user reads them."""
    cases = {
        (kinds.POSITIVE, "0"): "expected a number > 0, got 0",
        (kinds.POSITIVE_INT, "1e3"): "expected a whole number, got '1e3'",
        (kinds.SEED, "-1"): "expected a number in [0, 4294967295], got -1",
        (kinds.PROBABILITY, "nan"): "expected a finite number, got nan",
        (kinds.FRACTION, "1e308"): "expected a number in (0, 1), got 1e308",
        (Number(), "1e39"): "expected a number and at most 3.40282e+38 in size (float32 holds no more), got 1e39",
        (PathKind(FOLDER), str(tmp_path / "x")): f"{tmp_path / 'x'} does not exist: pass an existing folder",
        (PathKind(FOLDER, uris=kinds.MODEL_URIS), str(tmp_path / "x")):
            f"{tmp_path / 'x'} does not exist: pass an existing folder, or a URI (models:/…, runs:/…)",
        (PathKind(FOLDER, uris=kinds.MODEL_URIS), "models:/"):
            "expected an existing folder or a URI models:/… or runs:/…, got 'models:/'",
        (ModelName(), "a:b"): "expected a model name (no '/', '\\' or ':', not '.' or starting with '..'), got 'a:b'",
        (PathKind(WRITABLE), "/proc/x"): "/proc/x cannot be written (/proc is not writable): pass a folder to write "
                                         "elsewhere",
        (Uri(kinds.TRACKING_SCHEMES), "sqlite://x.db"):
            "sqlite://x.db: a SQLite store is sqlite:///relative/path.db or sqlite:////absolute/path.db (three "
            "slashes, then the file)",
        (Items(kinds.FRACTION), "0.2,,0.5"): "'0.2,,0.5' has an empty value at position 2 of 3: give one value per "
                                             "comma-separated field",
        (Items(kinds.POSITIVE), "1,1.0"): "'1,1.0' lists 1 twice: give each value once",
        (Device(), "mps"): "expected auto, cpu, cuda or cuda:N, got 'mps': the runs train on the CPU or on CUDA only",
    }
    for (kind, text), message in cases.items():
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            kind(text)
        assert str(refused.value) == message
    with pytest.raises(argparse.ArgumentTypeError, match=r"^nosuch://b/x: unknown scheme 'nosuch': use one of s3://"):
        Uri(kinds.STORAGE_SCHEMES)("nosuch://b/x")
    assert Uri(kinds.TRACKING_SCHEMES)("postgresql+psycopg2://h/db") == "postgresql+psycopg2://h/db"
    assert Items(kinds.POSITIVE_INT)(" 3, 1") == [3, 1] and kinds.SEED("4294967295") == 2**32 - 1
    assert PathKind(FOLDER, uris=kinds.MODEL_URIS)("models:/demo/1") == "models:/demo/1"


spec = importlib.util.spec_from_file_location("forgetting", REPO / "examples" / "forgetting.py")
forgetting = importlib.util.module_from_spec(spec)
spec.loader.exec_module(forgetting)
TOO_LONG = ("File name too long: a name in the path is longer than the file system takes (255 bytes), or the whole "
            "path (4096): use a shorter path")


@pytest.mark.parametrize("script", ["examples/forgetting.py", "make ui's store check"])
def test_a_path_the_system_refuses_is_one_line_in_the_scripts(script, tmp_path, capsys):
    """The scripts' paths that no parser checks: forgetting.py's run directories, `make ui`'s store. Before: a
    traceback."""
    with made(tmp_path):
        for path, said in os_refused(tmp_path).items():
            if script == "examples/forgetting.py":
                code, named = forgetting.main([path, str(tmp_path / "a-folder")]), f"error: {path}/results.json: "
            else:
                code, named = store_check.main([f"sqlite:///{path}/mlflow.db"]), f"jumplora: error: {path}/mlflow.db: "
            err = capsys.readouterr().err
            assert (code, len(err.splitlines())) == (2, 1) and err.startswith(f"{named}{said}: "), err
        assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file", "a-folder", "unreadable"]


ENV = {**os.environ, "PYTHONPATH": str(REPO)}
LONG = "x" * 256  # forgetting.py's run directory, a name the system refuses (make ui's: tests/tracking)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("argv", "line"), [
    ([str(Path(sys.executable).parent / "jumplora"), "run", "--lr", "nan"],
     "jumplora: error: argument --lr: expected a finite number, got nan (see `jumplora run --help`)"),
    ([sys.executable, str(REPO / "ray_jobs" / "grid_lambda.py"), "--order", "1", "--rungs", "0.2,,0.5"],
     "error: argument --rungs: '0.2,,0.5' has an empty value at position 2 of 3: give one value per comma-separated "
     "field (see grid_lambda.py --help)"),
    ([sys.executable, str(REPO / "examples" / "forgetting.py"), LONG, "."], f"error: {LONG}/results.json: {TOO_LONG}"),
], ids=["jumplora", "grid_lambda.py", "forgetting.py"])  # `python -m jumplora`: tests/cli/test_unexpected.py
def test_the_console_scripts_refuse_in_one_line(argv, line, tmp_path):
    done = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=170)
    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (2, [line], "")
    assert not any(tmp_path.iterdir())
