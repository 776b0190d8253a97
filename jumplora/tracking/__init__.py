"""MLflow tracking of continual runs, λ grids and sweeps, from rank 0 (or a Ray driver) only.

One store for every run (`store.resolve_uri`), one experiment per task order (`jumplora-order<N>`), a parent run per
continual run, grid or sweep and a child run per task and per (task, λ) trial, each found again by its `jumplora.key`
tag (DECISIONS, "Tracking identity"). Tracking never stops a run: a store that cannot answer is refused before any
work (`store.open_store`), a later failure is one warning and tracking off (`client.Tracker`).

- `store`: where the store is (runs root, URI, the CLI options, experiment names) and its first contact.
- `client`: the never-fatal MLflow client (`Tracker`, `Run`).
- `runs`: what is logged (keys, params, version tags, a child run per task, `ContinualLogger`, artifacts).
- `models`: the merged model as an MLflow model (a LoggedModel, its registration, its pyfunc, loading it back).
- `folders`: the Ray jobs' storage folders (grid, train_sequence.py, sweep); imported on its own (pyarrow)."""

from jumplora.tracking.client import KEY_TAG, KIND_TAG, PARENT_TAG, Run, Tracker, from_args, key_of, logged_since
from jumplora.tracking.models import (
    MERGED_MODEL_DIR,
    log_merged_model,
    model_folder,
    recorded_run,
    request_registration,
)
from jumplora.tracking.runs import (
    ContinualLogger,
    close_interrupted,
    log_completed_run,
    log_run_directory,
    logged_config,
    run_dir_tag,
    run_key,
    start_run,
    task_run_name,
)
from jumplora.tracking.store import (
    RAY_JOB_ENV,
    URI_ENV,
    add_model_options,
    add_options,
    add_tracking_uri,
    experiment_name,
    open_store,
    resolve_uri,
)

__all__ = [
    "KEY_TAG", "KIND_TAG", "MERGED_MODEL_DIR", "PARENT_TAG", "RAY_JOB_ENV", "URI_ENV", "ContinualLogger", "Run",
    "Tracker", "add_model_options", "add_options", "add_tracking_uri", "close_interrupted", "experiment_name",
    "from_args", "key_of", "log_completed_run", "log_merged_model", "log_run_directory", "logged_config",
    "logged_since", "model_folder", "open_store", "recorded_run", "request_registration", "resolve_uri",
    "run_dir_tag", "run_key", "start_run", "task_run_name",
]
