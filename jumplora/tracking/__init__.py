"""MLflow tracking of continual runs, λ grids and sweeps, from rank 0 (or a Ray driver) only: its modules in
ARCHITECTURE's table, why each choice in DECISIONS ("Tracking identity" and the items after it)."""

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
    "run_dir_tag", "run_key", "task_run_name",
]
