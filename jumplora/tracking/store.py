"""Where the MLflow store is: the runs root, the default and resolved URI, the database file of a local store, the
warning for a store inside a Ray job's temporary working directory, the CLI options, the experiment names."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jumplora.errors import JumpLoRAError
from jumplora.kinds import TRACKING_SCHEMES, WRITABLE, ModelName, Uri, path_problem, uri_problem

URI_ENV = "MLFLOW_TRACKING_URI"
RUNS_ROOT_ENV = "JUMPLORA_RUNS_ROOT"
DEFAULT_RUNS_ROOT = "runs"
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # artifacts of a local sqlite store, beside it
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's entrypoint


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


def experiment_name(order: int) -> str:
    return f"jumplora-order{order}"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<runs>/mlflow.db)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")


def add_register_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--register-model", default=None, metavar="NAME", type=ModelName(),
                        help="register the final merged model, logged to MLflow, as a new version of the registered "
                             "model NAME, with the run's tags (implies saving the merged model; a plain file store "
                             "has no registry: the model is then logged only)")
