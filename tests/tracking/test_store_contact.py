"""A tracking store that cannot answer is refused in one line, exit code 2, within `store.FIRST_CONTACT_SECONDS`
(15 s): by `report`, `track`, `eval` of a model URI, `make ui`'s check, and up front by `run` and the Ray drivers,
whatever is wrong with it (nothing listens, a host name that does not resolve, a server that never replies, a folder
SQLite cannot write in, a database another process holds locked, a file that is not a database, a folder that does
not exist). The in-process tests shorten the bound to `BOUND` seconds (the lock and reply waits to 1 s); the installed
command and `make ui` run with the real one."""

from __future__ import annotations

import contextlib
import http.server
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from jumplora.cli import main
from jumplora.errors import JumpLoRAError
from jumplora.tracking import __main__ as store_check
from jumplora.tracking import store
from ray_jobs import grid, sequence, sweep
from ray_jobs.cli import run_main
from tests.conftest import REPO, console_script
from tests.servers import free_port

CEILING = 60  # seconds: a generous ceiling on deciding, imports included (the bound itself is 15 s)
BOUND = 3  # FIRST_CONTACT_SECONDS in the in-process tests: a 1 s wait for a reply or a lock


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


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never replies."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def stores(tmp: Path, port: int, silent: int, wait: int) -> dict[str, tuple[str, str]]:
    """Each store state: its URI and what the one line says of it, up to the way out that the command adds."""
    (tmp / "notes.db").write_text("notes, not a database\n")
    return {
        "refused": (f"http://127.0.0.1:{port}",
                    f"the MLflow store http://127.0.0.1:{port} does not answer: nothing listens at 127.0.0.1:{port}: "
                    "start its server, or "),
        "unresolved": ("http://no-such-host.invalid:5000",
                       "the MLflow store http://no-such-host.invalid:5000 does not answer: the host name "
                       "no-such-host.invalid does not resolve: fix the name, or "),
        "silent": (f"http://127.0.0.1:{silent}",
                   f"the MLflow store http://127.0.0.1:{silent} does not answer: no reply within {wait} s: check that "
                   "it runs and can be reached from here, or "),
        "read-only": ("sqlite:////proc/mlflow.db",
                      "the MLflow store sqlite:////proc/mlflow.db cannot be opened: SQLite cannot open or create "
                      "/proc/mlflow.db: use a file in a folder you may write to, or "),
        "locked": (f"sqlite:///{tmp}/locked.db",
                   f"the MLflow store sqlite:///{tmp}/locked.db is locked: another process kept {tmp}/locked.db "
                   f"locked for {wait} s: let it finish (or stop it) and try again, or "),
        "not a database": (f"sqlite:///{tmp}/notes.db",
                           f"the MLflow store sqlite:///{tmp}/notes.db is not a database: {tmp}/notes.db is not a "
                           "SQLite file: name the database file of an MLflow store, or "),
        "no folder": (f"sqlite:///{tmp}/missing/mlflow.db",
                      f"sqlite:///{tmp}/missing/mlflow.db: the folder {tmp}/missing does not exist: create it first, "
                      "or fix the path"),
    }


def run_dir(tmp: Path) -> Path:
    """What `jumplora track` takes as a run directory before opening the store: one with checkpoints, unfinished."""
    (tmp / "run-dir" / "checkpoints").mkdir(parents=True, exist_ok=True)
    return tmp / "run-dir"


def driver(main_, *args: str) -> Callable[[str, Path], int]:
    return lambda uri, tmp: run_main(main_, [*args, "--preset", "smoke", "--storage-path", str(tmp / "ray"),
                                             "--cache-dir", str(tmp / "cache"), "--tracking-uri", uri])


class Command(NamedTuple):
    call: Callable[[str, Path], int]  # the command on a store's URI, in a temporary folder
    start: str  # how its error line begins
    way_out: str  # what it offers instead of the store
    usage: str = ""  # its --help, named where its --tracking-uri refuses a folder that does not exist


JUMPLORA, ANOTHER, OR_NONE = "jumplora: error: ", "pass another --tracking-uri", "pass another --tracking-uri or " \
                                                                                 "--no-tracking"
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
    "grid_lambda.py": Command(driver(grid.main, "--order", "1"), "error: ", OR_NONE, "grid_lambda.py --help"),
    "train_sequence.py": Command(driver(sequence.main, "--order", "1"), "error: ", OR_NONE,
                                 "train_sequence.py --help"),
    "reproduce.py": Command(driver(sweep.main, "--methods", "inclora", "--orders", "1", "--seeds", "42"), "error: ",
                            OR_NONE, "reproduce.py --help"),
    "make ui": Command(lambda uri, tmp: store_check.main([uri]), JUMPLORA, "pass make ui UI_STORE=<another store>"),
}


def expected_line(command: str, state: str, said: str) -> str:
    _, start, way_out, usage = COMMANDS[command]
    if state != "no folder":
        return f"{start}{said}{way_out}"
    return f"{start}argument --tracking-uri: {said} (see {usage})" if usage else f"{start}{said}"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("state", ["refused", "unresolved", "silent", "read-only", "locked", "not a database",
                                   "no folder"])
def test_a_store_that_cannot_answer_is_one_line_and_exit_2(state, command, tmp_path, silent_port, capsys,
                                                            monkeypatch):
    monkeypatch.setattr(store, "FIRST_CONTACT_SECONDS", BOUND)
    monkeypatch.chdir(tmp_path)
    uri, said = stores(tmp_path, free_port(), silent_port, BOUND - store.MARGIN_SECONDS)[state]
    with locked(tmp_path / "locked.db") if state == "locked" else contextlib.nullcontext():
        start = time.monotonic()
        code = COMMANDS[command].call(uri, tmp_path)
        elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    assert (code, captured.err.splitlines()) == (2, [expected_line(command, state, said)])
    assert captured.out == "" and elapsed < CEILING


def test_the_installed_command_and_make_ui_decide_within_the_real_bound(tmp_path, installed_env):
    """`jumplora report` through the console script, from a folder outside the repository, on a locked store: the
    lock is waited for 13 s, then the store is refused within the real bound, and the whole stderr is the one line
    (no retry message of MLflow's, no SQLAlchemy link); meanwhile `make ui` on a store where nothing listens: the
    line, make's own, and no server started."""
    outside = tmp_path / "outside"
    outside.mkdir()
    states = stores(tmp_path, free_port(), silent=0, wait=store.FIRST_CONTACT_SECONDS - store.MARGIN_SECONDS)
    (locked_uri, locked_said), (refused_uri, refused_said) = states["locked"], states["refused"]
    commands = {
        "report": [console_script(), "report", "jumplora-order1", "--out", str(tmp_path / "report"),
                   "--tracking-uri", locked_uri],
        "make ui": ["make", "-s", "-f", str(REPO / "Makefile"), "-o", "install", "ui",  # its runs/ made outside too
                    f"VENV={Path(sys.executable).parents[1]}", f"UI_STORE={refused_uri}"],
    }
    with locked(tmp_path / "locked.db"):
        started = {name: (time.monotonic(), subprocess.Popen(command, cwd=outside, env=installed_env, text=True,
                                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                   for name, command in commands.items()}
        done = {name: (*process.communicate(timeout=2 * CEILING), process.returncode, time.monotonic() - start)
                for name, (start, process) in started.items()}
    assert done["report"][:3] == ("", f"{JUMPLORA}{locked_said}{ANOTHER}\n", 2)
    out, err, code, _ = done["make ui"]
    assert (out, code) == ("", 2)  # the server's banner is never printed: the check comes first
    line, make_says = err.splitlines()
    assert line == f"{JUMPLORA}{refused_said}pass make ui UI_STORE=<another store>" and make_says.endswith(" Error 2")
    assert all(elapsed < CEILING for *_, elapsed in done.values()), done


class Answering(http.server.BaseHTTPRequestHandler):
    """A server that is not MLflow's: 404 on /health."""

    def do_GET(self):
        self.send_error(404)

    def log_message(self, *args):
        pass


def test_what_else_a_store_can_be_is_one_line_too(tmp_path, monkeypatch):
    """A web server that is not MLflow's, one that hangs up at once, a damaged SQLite file, a database server whose
    driver is missing, and a first contact that hangs where no timeout of its own reaches (a name's resolution)."""
    monkeypatch.setattr(store, "FIRST_CONTACT_SECONDS", BOUND)
    web = http.server.HTTPServer(("127.0.0.1", 0), Answering)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    damaged = tmp_path / "damaged.db"
    with contextlib.closing(sqlite3.connect(damaged)) as database:
        database.execute("CREATE TABLE t (x)")
        database.commit()
    with damaged.open("r+b") as file:  # the first page's b-tree header, after the 100-byte file header
        file.seek(100)
        file.write(b"\xff" * 12)
    with socket.socket() as hangs_up:
        hangs_up.bind(("127.0.0.1", 0))
        hangs_up.listen(8)
        def hang_up() -> None:
            connection = hangs_up.accept()[0]
            connection.recv(65536)  # the whole request read: the close is a clean end, not a reset
            connection.close()

        threading.Thread(target=hang_up, daemon=True).start()
        cases = {
            f"http://127.0.0.1:{web.server_port}": f"the MLflow store http://127.0.0.1:{web.server_port} is not an "
                                                   "MLflow server: /health answered HTTP 404: check the URI, or pass "
                                                   "another --tracking-uri",
            f"http://127.0.0.1:{hangs_up.getsockname()[1]}": f"the MLflow store http://127.0.0.1:"
                                                             f"{hangs_up.getsockname()[1]} does not answer "
                                                             "(RemoteDisconnected: Remote end closed connection "
                                                             "without response): check its server, or pass another "
                                                             "--tracking-uri",
            f"sqlite:///{damaged}": f"the MLflow store sqlite:///{damaged} cannot be opened: {damaged}: database "
                                    "disk image is malformed: check the file, or pass another --tracking-uri",
            "postgresql+nosuchdriver://127.0.0.1/mlflow": "the MLflow store postgresql+nosuchdriver://127.0.0.1/"
                                                          "mlflow cannot be opened (NoSuchModuleError: Can't load "
                                                          "plugin: sqlalchemy.dialects:postgresql.nosuchdriver): "
                                                          "check the database server and its Python driver, or pass "
                                                          "another --tracking-uri",
        }
        for uri, line in cases.items():
            with pytest.raises(JumpLoRAError) as refused:
                store.open_store(uri)
            assert str(refused.value) == line
    web.shutdown()
    monkeypatch.setattr(store, "first_contact", lambda *args: time.sleep(30))
    start = time.monotonic()
    with pytest.raises(JumpLoRAError) as refused:
        store.open_store("http://slow.example:5000")
    assert str(refused.value) == ("the MLflow store http://slow.example:5000 does not answer: no reply within 3 s: "
                                  "check that it runs and can be reached from here, or pass another --tracking-uri")
    assert time.monotonic() - start < BOUND + 1


def test_a_store_that_answered_is_asked_again_only_to_write(tmp_path, monkeypatch):
    """The first contact is made once per store and process (MLflow's own retries take over from there); a reader's
    contact does not tell whether the store may be written, so a writer asks again: another writer holds the lock."""
    monkeypatch.setattr(store, "FIRST_CONTACT_SECONDS", BOUND)
    monkeypatch.setattr(store, "answered", {})
    database = tmp_path / "mlflow.db"
    uri = f"sqlite:///{database}"
    with pytest.raises(store.MissingStore):  # a reader creates no store
        store.open_store(uri)
    assert not database.exists()
    writer = sqlite3.connect(database, isolation_level=None)
    assert store.open_store(uri) == uri
    writer.execute("BEGIN IMMEDIATE")  # a write lock: readers go on, writers wait
    try:
        assert store.open_store(uri) == uri  # answered already: not asked again
        with pytest.raises(JumpLoRAError, match=f"^the MLflow store {uri} is locked: another process kept {database} "
                                                "locked for 1 s"):
            store.open_store(uri, writes=True)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert store.open_store(uri, writes=True) == uri and store.answered == {uri: True}
