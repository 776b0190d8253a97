"""Where the MLflow store is: the runs root, the default and resolved URI, the database file of a local store, the
warning for a store inside a Ray job's temporary working directory, the first contact with a store (`open_store`, the
one way the product opens one), the CLI options, the experiment names."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import socket
import sqlite3
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from jumplora.errors import JumpLoRAError
from jumplora.kinds import TRACKING_SCHEMES, WRITABLE, ModelName, Uri, path_problem, uri_problem, uri_scheme

URI_ENV = "MLFLOW_TRACKING_URI"
RUNS_ROOT_ENV = "JUMPLORA_RUNS_ROOT"
DEFAULT_RUNS_ROOT = "runs"
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # artifacts of a local sqlite store, beside it
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's entrypoint
FIRST_CONTACT_SECONDS = 15  # the most a store's first contact takes (DECISIONS, "A store that cannot answer")
MARGIN_SECONDS = 2  # the store's own waits (a reply, a lock) end this much earlier, so that the line names them
DATABASE_SERVERS = ("postgresql", "mysql", "mssql")
INSTEAD = "pass another --tracking-uri"  # the way out every refusal of a store ends with, unless told another
answered: dict[str, bool] = {}  # the stores that answered their first contact in this process: URI → writes checked


def runs_root(root: str | Path | None = None) -> Path:
    """The runs root, absolute: `root`, else `JUMPLORA_RUNS_ROOT`, else `./runs`."""
    return Path(root or os.environ.get(RUNS_ROOT_ENV) or DEFAULT_RUNS_ROOT).expanduser().resolve()


def default_uri(root: str | Path | None = None) -> str:
    return f"sqlite:///{runs_root(root) / STORE_FILE}"


def resolve_uri(cli_uri: str | None = None, root: str | Path | None = None) -> str:
    """`--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the default store under the runs root; one that can never
    answer (an unknown scheme, a mistyped sqlite path, a runs root that is a file) is refused here, at the start."""
    given = cli_uri or os.environ.get(URI_ENV)
    if given:
        problem = uri_problem(given, TRACKING_SCHEMES)
        if problem is not None:
            where = "--tracking-uri" if cli_uri else f"${URI_ENV}"
            raise JumpLoRAError(f"{where}: {problem}")
    else:
        problem = path_problem(runs_root(root), WRITABLE)
        if problem is not None:
            raise JumpLoRAError(f"the runs root {runs_root(root)} (${RUNS_ROOT_ENV}, else ./{DEFAULT_RUNS_ROOT}), "
                                f"where the MLflow store is, {problem}; or pass --tracking-uri or --no-tracking")
    uri = given or default_uri(root)
    warn_if_temporary(uri)
    return uri


def local_store_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI (None for a server)."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def in_ray_job_working_dir(path: Path) -> bool:
    """True when `path` lies in the temporary copy of the working directory that `ray job submit` runs in."""
    path = path.resolve()
    if "runtime_resources" in path.parts or "working_dir_files" in path.parts:
        return True
    job = os.environ.get(RAY_JOB_ENV, "")
    return '"working_dir"' in job and path.is_relative_to(Path.cwd().resolve())


def warn_if_temporary(uri: str) -> bool:
    store = local_store_path(uri)
    if store is None or not in_ray_job_working_dir(store):
        return False
    print(f"warning: the MLflow store {store} lies in the Ray job's temporary working directory and goes away with "
          "it: pass --tracking-uri sqlite:////absolute/path/mlflow.db (or an http:// server)", file=sys.stderr)
    return True


def open_store(uri: str, writes: bool = False, instead: str = INSTEAD) -> str:
    """`uri`, once the store there answered a first contact (with `writes`: and may be written) within
    `FIRST_CONTACT_SECONDS`, once per process; else one line (JumpLoRAError) naming the store, what is wrong and the
    fix, ending with `instead`. MLflow is set first to fail fast once a store answered (`fail_fast`): its retries with
    back-off are for a store that answered and then blinks, never for one that never answered."""
    fail_fast()
    if answered.get(uri) or (uri in answered and not writes):
        return uri
    outcome: list[BaseException | None] = []

    def contact() -> None:
        try:
            first_contact(uri, writes, instead)
            outcome.append(None)
        except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
            outcome.append(error)

    thread = threading.Thread(target=contact, name=f"first contact with {uri}", daemon=True)
    thread.start()
    thread.join(FIRST_CONTACT_SECONDS)  # what no timeout of the store's own bounds: a name's resolution, a driver
    if not outcome:
        raise refusal(uri, f"does not answer: no reply within {FIRST_CONTACT_SECONDS} s",
                      "check that it runs and can be reached from here", instead)
    if outcome[0] is not None:
        raise outcome[0]
    answered[uri] = writes or answered.get(uri, False)
    return uri


def fail_fast() -> None:
    """MLflow's settings for a store that answered: 2 HTTP retries (MLflow's default is 7, ~4 min with back-off), a
    20 s timeout, no "View run" line per run; urllib3's warning per retry, the SQLAlchemy store's retry messages
    (with SQLAlchemy's "Background on this error" link) and the Databricks client's fallback warning off the screen:
    a failure is one line, the caller's."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("urllib3.connectionpool", "mlflow.store.db.utils", "mlflow.utils.databricks_utils"):
        logging.getLogger(name).setLevel(logging.ERROR)


def first_contact(uri: str, writes: bool, instead: str) -> None:
    """Ask the store at `uri` once, each wait bounded by `FIRST_CONTACT_SECONDS` − `MARGIN_SECONDS`: a server's
    `/health`, a SQLite file (read; with `writes`, a write lock taken and given back), a database server's connection;
    a file store (a `file:` URI or a path) and Databricks through MLflow's client, which does not retry at opening
    them."""
    scheme = uri_scheme(uri)
    if scheme in ("http", "https"):
        ask_server(uri, instead)
    elif scheme == "sqlite":
        open_sqlite(uri, writes, instead)
    elif scheme in DATABASE_SERVERS:
        connect_database(uri, instead)
    else:
        ask_mlflow(uri, instead)


class MissingStore(JumpLoRAError):
    """A read of a local store whose database file is not there: it holds nothing (and is not created)."""


def refusal(uri: str, what: str, fix: str, instead: str, kind: type[JumpLoRAError] = JumpLoRAError) -> JumpLoRAError:
    return kind(f"the MLflow store {uri} {what}: {fix}, or {instead}")


def ask_server(uri: str, instead: str) -> None:
    wait = FIRST_CONTACT_SECONDS - MARGIN_SECONDS
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=wait) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise refusal(uri, f"is not an MLflow server: /health answered HTTP {error.code}", "check the URI",
                      instead) from None
    except OSError as error:  # urllib's URLError is one, with the socket's error as its reason
        reason = getattr(error, "reason", error)
        if isinstance(reason, ConnectionRefusedError):
            what, fix = f"does not answer: nothing listens at {urlsplit(uri).netloc}", "start its server"
        elif isinstance(reason, socket.gaierror):
            what, fix = f"does not answer: the host name {urlsplit(uri).hostname} does not resolve", "fix the name"
        elif isinstance(reason, TimeoutError):
            what, fix = f"does not answer: no reply within {wait} s", "check that it runs and can be reached from here"
        else:
            what, fix = f"does not answer ({type(reason).__name__}: {reason})", "check its server"
        raise refusal(uri, what, fix, instead) from None


# what a SQLite error's primary code says of the store, and its fix ({path}, {wait}: filled in); another one (a
# read-only file, a damaged one) is named in SQLite's words
SQLITE_REFUSALS = {
    sqlite3.SQLITE_CANTOPEN: ("cannot be opened: SQLite cannot open or create {path}",
                              "use a file in a folder you may write to"),
    sqlite3.SQLITE_BUSY: ("is locked: another process kept {path} locked for {wait} s",
                          "let it finish (or stop it) and try again"),
    sqlite3.SQLITE_NOTADB: ("is not a database: {path} is not a SQLite file",
                            "name the database file of an MLflow store"),
}


def open_sqlite(uri: str, writes: bool, instead: str) -> None:
    """Read the database of a `sqlite:///` store, opened read-only (`mode=ro`: a read creates and changes nothing);
    with `writes`, take its write lock and give it back, writing nothing. A lock another process holds is waited for.
    A database file that is not there yet is created by the first write (MLflow makes it and its folder), never by
    this contact: with `writes` its nearest existing folder must take it (`kinds.path_problem`); a read of it is
    refused, since nothing is stored there."""
    path, wait = local_store_path(uri), FIRST_CONTACT_SECONDS - MARGIN_SECONDS
    if not path.exists():
        if path_problem(path.parent.absolute(), WRITABLE) is not None:
            what, fix = SQLITE_REFUSALS[sqlite3.SQLITE_CANTOPEN]
            raise refusal(uri, what.format(path=path), fix, instead)
        if not writes:
            raise refusal(uri, f"does not exist (no file {path})", "check the path", instead, MissingStore)
        return
    try:
        address = f"file:{urllib.parse.quote(str(path.absolute()))}?mode={'rw' if writes else 'ro'}"
        with contextlib.closing(sqlite3.connect(address, timeout=wait, isolation_level=None, uri=True)) as database:
            database.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if writes:
                database.execute("BEGIN IMMEDIATE")
                database.execute("ROLLBACK")
    except OSError:
        what, fix = SQLITE_REFUSALS[sqlite3.SQLITE_CANTOPEN]
        raise refusal(uri, what.format(path=path), fix, instead) from None
    except sqlite3.Error as error:
        code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF  # the primary code of an extended one
        what, fix = SQLITE_REFUSALS.get(code, ("cannot be opened: {path}: {error}", "check the file"))
        raise refusal(uri, what.format(path=path, wait=wait, error=error), fix, instead) from None


def connect_database(uri: str, instead: str) -> None:
    """Connect to a database server's store and close the connection (SQLAlchemy, with the URI's driver)."""
    import sqlalchemy

    try:
        sqlalchemy.create_engine(uri).connect().close()
    except Exception as error:  # noqa: BLE001 - a missing driver, a refused connection: the driver's words
        first_line = (str(error).strip().splitlines() or [""])[0]  # without SQLAlchemy's "Background" link
        raise refusal(uri, f"cannot be opened ({type(error).__name__}: {first_line})",
                      "check the database server and its Python driver", instead) from None


def ask_mlflow(uri: str, instead: str) -> None:
    """List one experiment of the store through MLflow's client: what MLflow refuses (a file store, which MLflow 3
    keeps in maintenance mode unless MLFLOW_ALLOW_FILE_STORE=true; Databricks without credentials) is the store's one
    line, in MLflow's first sentence, not a traceback."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except MlflowException as error:
        said = re.split(r"(?<=\.)\s", error.message.strip(), maxsplit=1)[0].rstrip(".")
        fix = "check the URI and the store's set-up" if uri_scheme(uri) == "databricks" else \
            "use a database store such as sqlite:///runs/mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true"
        raise refusal(uri, f"is refused by MLflow ({said})", fix, instead) from None


def experiment_name(order: int) -> str:
    return f"jumplora-order{order}"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                        help=f"MLflow tracking URI (default: ${URI_ENV}, else sqlite:///<runs root>/{STORE_FILE}, the "
                             f"runs root ./{DEFAULT_RUNS_ROOT} or ${RUNS_ROOT_ENV})")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")


def add_register_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--register-model", default=None, metavar="NAME", type=ModelName(),
                        help="register the final merged model, logged to MLflow, as a new version of the registered "
                             "model NAME, with the run's tags (implies saving the merged model; a plain file store "
                             "has no registry: the model is then logged only)")
