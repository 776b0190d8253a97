"""A tracking store is asked, first, what the command will ask it (`store.open_store`): a server a search of its
experiments (its API, not only its `/health`), a SQLite file a read, and a write rolled back when the command logs.
One that cannot answer is refused in one line, exit code 2, within `store.DEFAULT_TIMEOUT` (15 s): by `report`,
`track`, `eval` of a model URI, `make ui`'s check, and up front by `run` and the Ray drivers (`tracking.from_args`),
whose later failures are one warning and the run goes on. The tests shorten the bound to `BOUND` seconds through its
one setting, `$JUMPLORA_STORE_TIMEOUT` (the waits for a reply or a lock to 1 s); the fake servers are threads of the
test process on 127.0.0.1 (`tests.servers.fake_server`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from jumplora import tracking
from jumplora.cli import main
from jumplora.errors import JumpLoRAError
from jumplora.tracking import __main__ as store_check
from jumplora.tracking import store
from ray_jobs import grid_lambda, reproduce, train_sequence
from ray_jobs.cli import run_main
from tests.conftest import REPO, console_script
from tests.servers import fake_server

CEILING = 60  # seconds: a generous ceiling on a console script deciding, imports included (the bound is 15 s)
BOUND = 3  # $JUMPLORA_STORE_TIMEOUT in these tests: a 1 s wait for a reply or a lock
MLFLOW_BOUNDS = ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES")  # what `fail_fast` sets
ANOTHER = "pass another --tracking-uri"
NOT_HTTP = "does not speak HTTP: it answered 'SSH-2.0-OpenSSH_9.6': check the URI's port (an MLflow server answers " \
           "HTTP there)"
FAILED = "failed a search of its experiments: HTTP 500 (no such table: experiments): check its server (its log says " \
         "why)"
NO_REPLY = "does not answer: no reply within {} s: check that it runs and can be reached from here"
LOCKED = "is locked: another process kept {path} locked for {wait} s: let it finish (or stop it) and try again"


@pytest.fixture
def bound(monkeypatch) -> Iterator[None]:
    """The bound shortened to `BOUND` s; MLflow's settings that a first contact sets for the process (`fail_fast`)
    unset for the test and given back afterwards (monkeypatch would not restore what the product set), and the stores
    that answered before forgotten."""
    monkeypatch.setenv(store.TIMEOUT_ENV, str(BOUND))
    monkeypatch.setattr(store, "answered", {})
    saved = {name: os.environ.pop(name, None) for name in MLFLOW_BOUNDS}
    yield
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value


@contextlib.contextmanager
def locked(database: Path) -> Iterator[None]:
    """`database` held by an open exclusive transaction of another connection: nobody else reads or writes it."""
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE IF NOT EXISTS t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def database(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as made:
        made.execute("CREATE TABLE t (x)")
        made.commit()
    return path


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[bool]:
    """A tmpfs of `size` mounted at `folder` while the block runs: True; False where this test may not mount one (not
    root, or no mount(8)), `folder` then a plain folder."""
    folder.mkdir()
    mounted = shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=True)


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """A SQLite store on a tmpfs remounted read-only; where the test may not mount one and is not root, a folder and a
    file without write permission, which SQLite refuses in the same words (root's writes ignore permission bits: the
    case is then skipped)."""
    with tmpfs(folder, "1m") as mounted:
        path = database(folder / "mlflow.db")
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        elif os.geteuid() != 0:
            path.chmod(0o444)
            folder.chmod(0o555)
        else:
            pytest.skip("a read-only file system needs mount(8)")
        try:
            yield path
        finally:
            if not mounted:
                folder.chmod(0o755)  # for the folder's removal


@contextlib.contextmanager
def full(folder: Path, with_database: bool) -> Iterator[Path]:
    """The path of a SQLite store (made first with `with_database`) on a tmpfs filled to the last byte."""
    with tmpfs(folder, "256k") as mounted:
        if not mounted:
            pytest.skip("a full disk needs a tmpfs of its own: mount(8), as root")
        path = database(folder / "mlflow.db") if with_database else folder / "mlflow.db"
        with (folder / "filler").open("wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:
                filler.write(bytes(4096))
        yield path


class Case(NamedTuple):
    read: str | None  # what a read's contact says of the store (None: it answers), up to the way out
    write: str | None  # and a writer's


SQLITE_CASES = {
    "missing": Case("does not exist (no file {path}): check the path", None),
    "locked": Case(LOCKED, LOCKED),
    "not a database": Case(*["is not a database: {path} is not a SQLite file: name the database file of an MLflow "
                             "store"] * 2),
    "damaged": Case(*["cannot be opened: {path}: database disk image is malformed: check the file"] * 2),
    "in a folder SQLite cannot write": Case(*["cannot be opened: SQLite cannot open or create {path}: use a file in "
                                              "a folder you may write to"] * 2),
    "read-only file system": Case(None, "cannot be written: {path} is read-only (its file system, or its "
                                        "permissions): make it writable, or use a store on a file system you may "
                                        "write to"),
    "full disk": Case(None, "cannot be written: the disk that holds {path} is full: free some space there"),
    "full disk, no file yet": Case("does not exist (no file {path}): check the path",
                                   "cannot be written: the disk that holds {path} is full: free some space there"),
    "answering": Case(None, None),
}


@contextlib.contextmanager
def sqlite_store(state: str, tmp: Path) -> Iterator[Path]:
    """The database file of a SQLite store in `state`."""
    if state in ("missing", "answering"):
        yield tmp / "mlflow.db" if state == "missing" else database(tmp / "mlflow.db")
    elif state == "locked":
        with locked(tmp / "mlflow.db"):
            yield tmp / "mlflow.db"
    elif state == "not a database":
        (tmp / "notes.db").write_text("notes, not a database\n")
        yield tmp / "notes.db"
    elif state == "damaged":
        with database(tmp / "damaged.db").open("r+b") as file:  # the first page's b-tree header, after the file's
            file.seek(100)
            file.write(b"\xff" * 12)
        yield tmp / "damaged.db"
    elif state == "in a folder SQLite cannot write":
        yield Path("/proc/mlflow.db")
    elif state == "read-only file system":
        with read_only(tmp / "mount") as path:
            yield path
    else:
        with full(tmp / "mount", with_database=state == "full disk") as path:
            yield path


def files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def contact(uri: str, writes: bool) -> tuple[str | None, float]:
    """What the first contact said of the store at `uri` (None: it answered), and how long it took."""
    start = time.monotonic()
    try:
        store.open_store(uri, writes)
        said = None
    except JumpLoRAError as refused:
        said = str(refused)
    return said, time.monotonic() - start


@pytest.mark.parametrize("writes", [False, True], ids=["read", "write"])
@pytest.mark.parametrize("state", SQLITE_CASES)
def test_a_sqlite_store_is_asked_what_the_command_will_ask(state, writes, tmp_path, bound):
    """A read answers where the file can be read; a writer's contact writes, so a read-only file system and a full
    disk are refused, a missing file is refused to a read; the contact changes no byte and creates no file."""
    with sqlite_store(state, tmp_path) as path:
        before = files(tmp_path)
        said, elapsed = contact(f"sqlite:///{path}", writes)
        assert files(tmp_path) == before  # nothing written, no journal left, no store made
    expected = SQLITE_CASES[state][writes]
    assert said == (None if expected is None else
                    f"the MLflow store sqlite:///{path} {expected.format(path=path, wait=1)}, or {ANOTHER}")
    assert elapsed < BOUND + 1


SERVER_CASES = {
    "refusing": "does not answer: nothing listens at {netloc}: start its server",
    "never answering": NO_REPLY.format(BOUND - store.MARGIN_SECONDS),
    "/health only": NO_REPLY.format(BOUND - store.MARGIN_SECONDS),  # before: `report` held 71 s, then exit 3
    "very slow": NO_REPLY.format(BOUND),  # a byte every 0.2 s: no read's timeout runs out, the bound does
    "HTTP 500": FAILED,
    "not HTTP": NOT_HTTP,
    "not MLflow": "is not an MLflow server: /api/2.0/mlflow/experiments/search answered HTTP 404: check the URI",
    "hanging up": "does not answer (RemoteDisconnected: Remote end closed connection without response): check its "
                  "server",
    "a web page": "is not an MLflow server: /api/2.0/mlflow/experiments/search answered with no JSON object: check "
                  "the URI",
    "asking for credentials": "refused a search of its experiments: HTTP 401: set MLflow's credentials "
                              "(MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)",
    "answering a search only": None,
}


@pytest.mark.parametrize("state", SERVER_CASES)
def test_a_server_is_asked_for_a_search_of_its_experiments(state, bound):
    """The same read for a command that reads and one that writes (a server's write permission cannot be asked without
    writing: the commands' matrix below has writers); MLflow's later requests are bounded by the same setting."""
    with fake_server(state) as url:
        said, elapsed = contact(url, writes=False)
    expected = SERVER_CASES[state]
    netloc = url.removeprefix("http://")
    assert said == (None if expected is None else f"the MLflow store {url} {expected.format(netloc=netloc)}, or "
                                                  f"{ANOTHER}")
    assert elapsed < BOUND + 1
    assert {name: os.environ[name] for name in MLFLOW_BOUNDS} == {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
                                                                 "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}


def test_a_database_server_without_its_driver_and_a_bound_that_is_no_number_are_one_line(monkeypatch, bound):
    """One line each. (What no timeout of the store's own reaches, the thread's bound ends: the "very slow"
    server.)"""
    uri = "postgresql+nosuchdriver://127.0.0.1/mlflow"
    assert contact(uri, writes=True)[0] == (
        f"the MLflow store {uri} cannot be opened (NoSuchModuleError: Can't load plugin: sqlalchemy.dialects:"
        f"postgresql.nosuchdriver): check the database server and its Python driver, or {ANOTHER}")
    for given in ("2", "ten", "1.5"):
        monkeypatch.setenv(store.TIMEOUT_ENV, given)
        assert contact("sqlite:///unused.db", writes=False)[0] == (
            f"$JUMPLORA_STORE_TIMEOUT='{given}' is not a whole number of seconds above 2: set one (the default is 15) "
            "or unset it")


def test_a_store_that_stops_answering_later_costs_a_run_one_warning_within_the_bound(bound, capsys):
    """`run` and the Ray drivers open their store through `tracking.from_args`: a server that answered its first
    contact and then hangs holds a later call for MLflow's timeout, which the same setting set (3 s), and costs one
    warning line; tracking is off, the run goes on."""
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"  # one try, not three: the test waits one timeout (`bound`
    with fake_server("answering a search only") as url:  # gives the value back)
        tracker = tracking.from_args(argparse.Namespace(tracking_uri=url, no_tracking=False))
        start = time.monotonic()
        assert tracker.experiment("jumplora-order1") is None
        elapsed = time.monotonic() - start
    assert BOUND <= elapsed < BOUND + 2 and tracker.failed and not tracker.enabled
    assert capsys.readouterr().err == (  # the timeout's name is cut off the warning: the 3 s say it
        f"warning: MLflow tracking at {url} failed (MlflowException: API request to {url}/api/2.0/mlflow/experiments/"
        f"get-by-name failed with exception HTTPConnectionPool(host='127.0.0.1', port={url.rsplit(':')[-1]}): Max "
        "retries exceeded with url: /api/2.0/mlflow/experiments/get-by-name?experiment_name=jumplora-order1 (Caused "
        "by …); the run goes on without tracking, its local results are unaffected\n")


def run_dir(tmp: Path) -> Path:
    """What `jumplora track` takes as a run directory before opening the store: one with checkpoints, unfinished."""
    (tmp / "run-dir" / "checkpoints").mkdir(parents=True, exist_ok=True)
    return tmp / "run-dir"


def driver(script, *args: str) -> Callable[[str, Path], int]:
    return lambda uri, tmp: run_main(script, [*args, "--preset", "smoke", "--storage-path", str(tmp / "ray"),
                                              "--cache-dir", str(tmp / "cache"), "--tracking-uri", uri])


class Command(NamedTuple):
    call: Callable[[str, Path], int]  # the command on a store's URI, in a temporary folder
    start: str  # how its error line begins
    way_out: str  # what it offers instead of the store
    usage: str = ""  # its --help, named where its --tracking-uri refuses a folder that does not exist


JUMPLORA, OR_NONE = "jumplora: error: ", f"{ANOTHER} or --no-tracking"
COMMANDS = {
    "report": Command(lambda uri, tmp: main(["report", "jumplora-order1", "--out", str(tmp / "report"),
                                             "--tracking-uri", uri]), JUMPLORA, ANOTHER, "`jumplora report --help`"),
    "track": Command(lambda uri, tmp: main(["track", str(run_dir(tmp)), "--tracking-uri", uri]), JUMPLORA, ANOTHER,
                     "`jumplora track --help`"),
    "eval": Command(lambda uri, tmp: main(["eval", "models:/demo/1", "--order", "1", "--tracking-uri", uri]),
                    JUMPLORA, ANOTHER, "`jumplora eval --help`"),
    "run": Command(lambda uri, tmp: main(["run", "--quiet", "--out", str(tmp / "run"), "--cache-dir",
                                          str(tmp / "cache"), "--tracking-uri", uri]), JUMPLORA, OR_NONE,
                   "`jumplora run --help`"),
    "grid_lambda.py": Command(driver(grid_lambda.SCRIPT, "--order", "1"), "error: ", OR_NONE,
                              "grid_lambda.py --help"),
    "train_sequence.py": Command(driver(train_sequence.SCRIPT, "--order", "1"), "error: ", OR_NONE,
                                 "train_sequence.py --help"),
    "reproduce.py": Command(driver(reproduce.SCRIPT, "--methods", "inclora", "--orders", "1", "--seeds", "42"),
                            "error: ", OR_NONE, "reproduce.py --help"),
    "make ui": Command(lambda uri, tmp: store_check.main([uri]), JUMPLORA, "pass make ui UI_STORE=<another store>"),
}


@contextlib.contextmanager
def command_store(state: str, tmp: Path) -> Iterator[tuple[str, str]]:
    """The URI of a store in `state` and what the one line says of it, up to the way out that the command adds."""
    if state in SERVER_CASES:
        with fake_server(state) as url:
            yield url, f"the MLflow store {url} {SERVER_CASES[state].format(netloc=url.removeprefix('http://'))}, or "
    elif state == "no folder":
        yield (f"sqlite:///{tmp}/missing/mlflow.db", f"sqlite:///{tmp}/missing/mlflow.db: the folder {tmp}/missing "
                                                     "does not exist: create it first, or fix the path")
    else:
        with sqlite_store(state, tmp) as path:
            yield f"sqlite:///{path}", f"the MLflow store sqlite:///{path} {SQLITE_CASES[state].write}, or ".format(
                path=path, wait=1)


def expected_line(command: str, state: str, said: str) -> str:
    _, start, way_out, usage = COMMANDS[command]
    if state != "no folder":
        return f"{start}{said}{way_out}"
    return f"{start}argument --tracking-uri: {said} (see {usage})" if usage else f"{start}{said}"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("state", ["refusing", "/health only", "HTTP 500", "not HTTP", "in a folder SQLite cannot "
                                   "write", "locked", "not a database", "no folder"])
def test_every_command_refuses_a_store_that_cannot_answer_in_one_line_and_exit_2(state, command, tmp_path, capsys,
                                                                                 monkeypatch, bound):
    monkeypatch.chdir(tmp_path)
    with command_store(state, tmp_path) as (uri, said):
        start = time.monotonic()
        code = COMMANDS[command].call(uri, tmp_path)
        elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    assert (code, captured.err.splitlines()) == (2, [expected_line(command, state, said)])
    assert captured.out == "" and elapsed < CEILING


def test_a_store_that_answered_is_asked_again_only_to_write(tmp_path, bound):
    """The first contact is made once per store and process (MLflow's own retries take over from there); a reader's
    contact does not tell whether the store may be written, so a writer asks again: another writer holds the lock."""
    database_file = tmp_path / "mlflow.db"
    uri = f"sqlite:///{database_file}"
    with pytest.raises(store.MissingStore):  # a reader creates no store
        store.open_store(uri)
    assert not database_file.exists()
    writer = sqlite3.connect(database_file, isolation_level=None)
    assert store.open_store(uri) == uri
    writer.execute("BEGIN IMMEDIATE")  # a write lock: readers go on, writers wait
    try:
        assert store.open_store(uri) == uri  # answered already: not asked again
        with pytest.raises(JumpLoRAError, match=f"^the MLflow store {uri} is locked: another process kept "
                                                f"{database_file} locked for 1 s"):
            store.open_store(uri, writes=True)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert store.open_store(uri, writes=True) == uri and store.answered == {uri: True}


def test_the_installed_commands_decide_in_one_line(tmp_path, installed_env):
    """The console scripts as users run them, from a folder outside the repository, all at once. With the real bound:
    `jumplora report` on a server whose `/health` answers and whose API hangs (before: 71 s, then an internal error)
    and `jumplora track` on a SQLite store another process holds locked, each refused after its 13 s wait, and `make
    ui` on a store where nothing listens (its line, make's own, no server started). With the bound shortened to 3 s:
    `jumplora eval` on a server answering HTTP 500, `jumplora report` on a SQLite file that is not there (which it
    does not create), and `jumplora track` on a store on a read-only file system where the test may make one. The
    whole stderr of each is its one line, exit 2; the folder they run in is left empty."""
    outside, make_ui, wait = tmp_path / "outside", tmp_path / "make-ui", store.DEFAULT_TIMEOUT - store.MARGIN_SECONDS
    outside.mkdir()
    make_ui.mkdir()  # make ui makes runs/ where it runs, before its check
    short = {**installed_env, store.TIMEOUT_ENV: str(BOUND)}
    report = [console_script(), "report", "jumplora-order1", "--out", str(tmp_path / "report"), "--tracking-uri"]
    track = [console_script(), "track", str(run_dir(tmp_path)), "--tracking-uri"]
    with contextlib.ExitStack() as stack:
        hanging = stack.enter_context(fake_server("/health only"))
        failing = stack.enter_context(fake_server("HTTP 500"))
        refusing = stack.enter_context(fake_server("refusing"))
        stack.enter_context(locked(tmp_path / "locked.db"))
        missing = tmp_path / "absent" / "mlflow.db"
        missing.parent.mkdir()
        commands = {  # name: (command, environment, folder, the line)
            "report on a hanging API": ([*report, hanging], installed_env, outside,
                                        f"the MLflow store {hanging} {NO_REPLY.format(wait)}, or {ANOTHER}"),
            "track on a locked store": ([*track, f"sqlite:///{tmp_path}/locked.db"], installed_env, outside,
                                        f"the MLflow store sqlite:///{tmp_path}/locked.db "
                                        f"{LOCKED.format(path=tmp_path / 'locked.db', wait=wait)}, or {ANOTHER}"),
            "make ui": (["make", "-s", "-f", str(REPO / "Makefile"), "-o", "install", "ui",
                         f"VENV={Path(sys.executable).parents[1]}", f"UI_STORE={refusing}"], installed_env, make_ui,
                        f"the MLflow store {refusing} does not answer: nothing listens at "
                        f"{refusing.removeprefix('http://')}: start its server, or pass make ui UI_STORE=<another "
                        "store>"),
            "eval on HTTP 500": ([console_script(), "eval", "models:/demo/1", "--order", "1", "--tracking-uri",
                                  failing], short, outside, f"the MLflow store {failing} {FAILED}, or {ANOTHER}"),
            "report on a missing SQLite file": ([*report, f"sqlite:///{missing}"], short, outside,
                                                f"'jumplora-order1' is neither a run directory nor an MLflow "
                                                f"experiment: the MLflow store sqlite:///{missing} does not exist (no "
                                                f"file {missing}): check the path, or {ANOTHER}"),
        }
        with contextlib.suppress(pytest.skip.Exception):  # root without mount(8): left out
            read_only_file = stack.enter_context(read_only(tmp_path / "read-only"))
            commands["track on a read-only file system"] = (
                [*track, f"sqlite:///{read_only_file}"], short, outside,
                f"the MLflow store sqlite:///{read_only_file} {SQLITE_CASES['read-only file system'].write}, or "
                f"{ANOTHER}".format(path=read_only_file))
        started = {name: (time.monotonic(), subprocess.Popen(command, cwd=folder, env=env, text=True,
                                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                   for name, (command, env, folder, _) in commands.items()}
        done = {name: (*process.communicate(timeout=2 * CEILING), process.returncode, time.monotonic() - start)
                for name, (start, process) in started.items()}
    for name, (out, err, code, elapsed) in done.items():
        lines = err.splitlines()
        if name == "make ui":  # make says its own line after the command's
            assert len(lines) == 2 and lines[1].endswith(" Error 2"), err
            lines = lines[:1]
        assert (out, lines, code) == ("", [f"{JUMPLORA}{commands[name][3]}"], 2), name
        assert elapsed < CEILING, (name, elapsed)
    assert not any(outside.iterdir()) and not any(missing.parent.iterdir())  # no store made, by a read or a refusal
