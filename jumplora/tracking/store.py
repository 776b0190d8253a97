"""Where the MLflow store is (the runs root, the resolved URI, a local store's database file), the first contact with
a store (`open_store`, the one way the product opens one) and the bounds of MLflow's later calls (`fail_fast`), the
CLI options, the experiment names. Why a store is asked so, and within 15 s: `docs/DECISIONS.md`, "A store that
cannot answer is decided in ~15 s"."""

from __future__ import annotations

import argparse
import contextlib
import errno
import http.client
import logging
import os
import re
import socket
import sqlite3
import sys
import tempfile
import textwrap
import threading
import urllib.parse
from pathlib import Path
from urllib.parse import urlsplit

from jumplora.errors import JumpLoRAError
from jumplora.kinds import (
    TRACKING_SCHEMES,
    WRITABLE,
    ModelName,
    Uri,
    nearest_existing,
    path_problem,
    uri_problem,
    uri_scheme,
)

URI_ENV = "MLFLOW_TRACKING_URI"
RUNS_ROOT_ENV = "JUMPLORA_RUNS_ROOT"
DEFAULT_RUNS_ROOT = "runs"
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # artifacts of a local sqlite store, beside it
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's entrypoint
TIMEOUT_ENV = "JUMPLORA_STORE_TIMEOUT"  # seconds: the bound of every wait on a store (`store_timeout`)
DEFAULT_TIMEOUT = 15  # the most a store's first contact takes (DECISIONS, "A store that cannot answer")
MARGIN_SECONDS = 2  # the store's own waits (a reply, a lock) end this much earlier, so that the line names them
LATER_RETRIES = 2  # MLflow's retries of a later request to a server (its default is 7, ~4 min with back-off)
SEARCH = "/api/2.0/mlflow/experiments/search"  # a server's first contact: the read `report` makes first
PAGE = 4096  # bytes: what a writer's contact writes, and drops, beside a SQLite store that does not exist yet
DATABASE_SERVERS = ("postgresql", "mysql", "mssql")
INSTEAD = "pass another --tracking-uri"  # the way out every refusal of a store ends with, unless told another
answered: dict[str, bool] = {}  # the stores that answered their first contact in this process: URI → writes checked


def runs_root(root: str | Path | None = None) -> Path:
    """The runs root, absolute: `root`, else `JUMPLORA_RUNS_ROOT`, else `./runs`."""
    return Path(root or os.environ.get(RUNS_ROOT_ENV) or DEFAULT_RUNS_ROOT).expanduser().resolve()


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
    uri = given or f"sqlite:///{runs_root(root) / STORE_FILE}"
    store = local_store_path(uri)
    if store is not None and in_ray_job_working_dir(store):
        print(f"warning: the MLflow store {store} lies in the Ray job's temporary working directory and goes away "
              "with it: pass --tracking-uri sqlite:////absolute/path/mlflow.db (or an http:// server)",
              file=sys.stderr)
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


def open_store(uri: str, writes: bool = False, instead: str = INSTEAD) -> str:
    """`uri`, once the store there answered a first contact of the command's kind (a read; with `writes`: a write it
    grants) within `store_timeout()` seconds, once per process; else one line (JumpLoRAError) naming the store, what
    is wrong and the fix, ending with `instead`. MLflow's later calls are bounded first (`fail_fast`)."""
    bound = store_timeout()
    fail_fast(bound)
    if answered.get(uri) or (uri in answered and not writes):
        return uri
    if uri_scheme(uri) in ("http", "https"):  # MLflow's HTTP client loaded before the clock starts: the bound is the
        import mlflow.utils.rest_utils  # noqa: F401 - store's, not an import's (2-5 s of CPU)
    outcome: list[BaseException | None] = []

    def contact() -> None:
        try:
            first_contact(uri, writes, instead, bound - MARGIN_SECONDS)
            outcome.append(None)
        except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
            outcome.append(error)

    thread = threading.Thread(target=contact, name=f"first contact with {uri}", daemon=True)
    thread.start()
    thread.join(bound)  # what no timeout of the store's own bounds: a name's resolution, a driver, a reply trickling
    if not outcome:
        raise refusal(uri, f"does not answer: no reply within {bound} s",
                      "check that it runs and can be reached from here", instead)
    if outcome[0] is not None:
        raise outcome[0]
    answered[uri] = writes or answered.get(uri, False)
    return uri


def store_timeout() -> int:
    """The bound, in seconds, of a store's first contact and of each later request to a server:
    `$JUMPLORA_STORE_TIMEOUT` (the tests shorten it), else `DEFAULT_TIMEOUT`."""
    given = os.environ.get(TIMEOUT_ENV, "").strip()
    if not given:
        return DEFAULT_TIMEOUT
    if not (given.isascii() and given.isdigit() and int(given) > MARGIN_SECONDS):
        raise JumpLoRAError(f"${TIMEOUT_ENV}={given!r} is not a whole number of seconds above {MARGIN_SECONDS}: set "
                            f"one (the default is {DEFAULT_TIMEOUT}) or unset it")
    return int(given)


def fail_fast(bound: int) -> None:
    """MLflow's settings for every later call to a store, set once for the process (a value set before is kept): a
    request waits `bound` seconds for a reply, retried `LATER_RETRIES` times; no "View run" line per run; the retry
    and fallback warnings of urllib3, the SQLAlchemy store and the Databricks client off the screen: a failure is
    one line, the caller's."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(LATER_RETRIES))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(bound))
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("urllib3.connectionpool", "mlflow.store.db.utils", "mlflow.utils.databricks_utils"):
        logging.getLogger(name).setLevel(logging.ERROR)


def first_contact(uri: str, writes: bool, instead: str, wait: int) -> None:
    """Ask the store at `uri` once, each wait of its own bounded by `wait` seconds, what the command will ask."""
    scheme = uri_scheme(uri)
    if scheme in ("http", "https"):
        ask_server(uri, instead, wait)
    elif scheme == "sqlite":
        open_sqlite(uri, writes, instead, wait)
    elif scheme in DATABASE_SERVERS:
        connect_database(uri, instead)
    else:
        ask_mlflow(uri, instead)


class MissingStore(JumpLoRAError):
    """A read of a local store whose database file is not there: it holds nothing (and is not created)."""


def refusal(uri: str, what: str, fix: str, instead: str, kind: type[JumpLoRAError] = JumpLoRAError) -> JumpLoRAError:
    return kind(f"the MLflow store {uri} {what}: {fix}, or {instead}")


def ask_server(uri: str, instead: str, wait: int) -> None:
    """Search the server's experiments for one, through MLflow's own HTTP client (the credentials its environment
    variables give, no retry): its API must answer, not only its `/health`, which answers while the API may hang or
    fail. A server's write permission cannot be asked without writing: a writer's contact is this read too."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        response = http_request(get_default_host_creds(uri), SEARCH, "GET", max_retries=0, backoff_factor=0,
                                retry_codes=(), timeout=wait, params={"max_results": 1})
    except Exception as error:  # noqa: BLE001 - MLflow's, requests' and urllib3's wrappers of the socket's error
        raise refusal(uri, *unanswered(uri, error, wait), instead) from None
    if response.status_code != 200:
        raise refusal(uri, *failed_request(response.status_code, said_by(response)), instead)
    if not isinstance(said_by(response, None), dict):
        raise refusal(uri, f"is not an MLflow server: {SEARCH} answered with no JSON object", "check the URI",
                      instead)


def said_by(response, default: object = "") -> object:
    """The JSON a server answered, or `default` when the answer is not JSON."""
    try:
        return response.json()
    except ValueError:
        return default


def failed_request(status: int, said: object) -> tuple[str, str]:
    """What an HTTP status other than 200 to the search says of the server, and the fix; MLflow's message (the first
    line, shortened), else nothing."""
    message = said.get("message") if isinstance(said, dict) else None
    lines = message.strip().splitlines() if isinstance(message, str) else []
    detail = f" ({textwrap.shorten(lines[0], 200)})" if lines else ""
    if status == 404:
        return f"is not an MLflow server: {SEARCH} answered HTTP 404", "check the URI"
    if status in (401, 403):
        return (f"refused a search of its experiments: HTTP {status}{detail}",
                "set MLflow's credentials (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or "
                "MLFLOW_TRACKING_TOKEN)")
    return f"failed a search of its experiments: HTTP {status}{detail}", "check its server (its log says why)"


def unanswered(uri: str, error: BaseException, wait: int) -> tuple[str, str]:
    """What a request that got no HTTP answer says of the server, and the fix, from the socket's or HTTP's error at
    the root of what MLflow, requests and urllib3 wrapped it in."""
    found = causes(error)
    if any(isinstance(cause, ConnectionRefusedError) for cause in found):
        return f"does not answer: nothing listens at {urlsplit(uri).netloc}", "start its server"
    if any(isinstance(cause, socket.gaierror) for cause in found):
        return f"does not answer: the host name {urlsplit(uri).hostname} does not resolve", "fix the name"
    if any(isinstance(cause, TimeoutError) for cause in found):
        return f"does not answer: no reply within {wait} s", "check that it runs and can be reached from here"
    for cause in found:
        if isinstance(cause, http.client.BadStatusLine) and not isinstance(cause, http.client.RemoteDisconnected):
            return (f"does not speak HTTP: it answered {textwrap.shorten(repr(cause.line.strip()), 80)}",
                    "check the URI's port (an MLflow server answers HTTP there)")
    root = found[-1]
    return (f"does not answer ({type(root).__name__}: {(str(root).strip().splitlines() or [''])[0]})",
            "check its server")


def causes(error: BaseException) -> list[BaseException]:
    """`error` and, breadth first, what it wraps: its cause and context, urllib3's `reason`, an exception among its
    arguments (urllib3's ProtocolError holds the HTTP error there)."""
    found, todo = [], [error]
    while todo:
        current = todo.pop(0)
        if isinstance(current, BaseException) and all(current is not seen for seen in found):
            found.append(current)
            todo += [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
    return found


# what a SQLite error's primary code says of the store, and its fix ({path}, {wait}: filled in); another one (a
# read-only file, a damaged one) is named in SQLite's words
SQLITE_REFUSALS = {
    sqlite3.SQLITE_CANTOPEN: ("cannot be opened: SQLite cannot open or create {path}",
                              "use a file in a folder you may write to"),
    sqlite3.SQLITE_BUSY: ("is locked: another process kept {path} locked for {wait} s",
                          "let it finish (or stop it) and try again"),
    sqlite3.SQLITE_NOTADB: ("is not a database: {path} is not a SQLite file",
                            "name the database file of an MLflow store"),
    sqlite3.SQLITE_READONLY: ("cannot be written: {path} is read-only (its file system, or its permissions)",
                              "make it writable, or use a store on a file system you may write to"),
    sqlite3.SQLITE_FULL: ("cannot be written: the disk that holds {path} is full", "free some space there"),
}


def open_sqlite(uri: str, writes: bool, instead: str, wait: int) -> None:
    """Read the database of a `sqlite:///` store, opened read-only (`mode=ro`: a read creates and changes nothing);
    with `writes`, write to it in a transaction rolled back (a read-only mount and a full disk grant the lock alone).
    A lock another process holds is waited for `wait` seconds. A file not there yet is left to MLflow's first write:
    with `writes` its nearest existing folder must take a page (`write_page`); a read of it is refused."""
    path = local_store_path(uri)
    if not path.exists():
        if path_problem(path.parent.absolute(), WRITABLE) is not None:
            what, fix = SQLITE_REFUSALS[sqlite3.SQLITE_CANTOPEN]
            raise refusal(uri, what.format(path=path), fix, instead)
        if not writes:
            raise refusal(uri, f"does not exist (no file {path})", "check the path", instead, MissingStore)
        write_page(uri, path, instead)
        return
    try:
        address = f"file:{urllib.parse.quote(str(path.absolute()))}?mode={'rw' if writes else 'ro'}"
        with contextlib.closing(sqlite3.connect(address, timeout=wait, isolation_level=None, uri=True)) as database:
            database.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if writes:  # a failed write leaves the transaction open: closing the connection rolls it back
                database.execute("BEGIN IMMEDIATE")
                database.execute("CREATE TABLE jumplora_write_check (x)")
                database.execute("ROLLBACK")
    except OSError:
        what, fix = SQLITE_REFUSALS[sqlite3.SQLITE_CANTOPEN]
        raise refusal(uri, what.format(path=path), fix, instead) from None
    except sqlite3.Error as error:
        code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF  # the primary code of an extended one
        what, fix = SQLITE_REFUSALS.get(code, ("cannot be opened: {path}: {error}", "check the file"))
        raise refusal(uri, what.format(path=path, wait=wait, error=error), fix, instead) from None


def write_page(uri: str, path: Path, instead: str) -> None:
    """A page written and dropped in the nearest existing folder of `path`, a database file to be, in a file without
    a name where the system makes one (`tempfile.TemporaryFile`): a full disk refuses it as it would MLflow's first
    write."""
    try:
        with tempfile.TemporaryFile(dir=nearest_existing(path.parent.absolute())) as probe:
            probe.write(bytes(PAGE))
            probe.flush()
    except OSError as error:
        full = error.errno in (errno.ENOSPC, errno.EDQUOT)
        what, fix = SQLITE_REFUSALS[sqlite3.SQLITE_FULL if full else sqlite3.SQLITE_CANTOPEN]
        raise refusal(uri, what.format(path=path), fix, instead) from None


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
    add_tracking_uri(parser, "MLflow tracking URI")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")


def add_tracking_uri(parser: argparse.ArgumentParser, what: str) -> None:
    """`--tracking-uri` (declared here only): `what` the store is to the command."""
    parser.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                        help=f"{what} (default: ${URI_ENV}, else sqlite:///<runs root>/{STORE_FILE}, the runs root "
                             f"./{DEFAULT_RUNS_ROOT} or ${RUNS_ROOT_ENV})")


def add_model_options(parser: argparse.ArgumentParser, where: str) -> None:
    """`--save-merged-model` (declared here only; the merged model is saved to `where`) and `--register-model`."""
    parser.add_argument("--save-merged-model", action="store_true",
                        help=f"save the final merged model (Hugging Face format) to {where} and log it to MLflow as a "
                             "model (a LoggedModel of the run)")
    parser.add_argument("--register-model", default=None, metavar="NAME", type=ModelName(),
                        help="register the final merged model, logged to MLflow, as a new version of the registered "
                             "model NAME, with the run's tags (implies saving the merged model; a plain file store "
                             "has no registry: the model is then logged only)")
