"""How the MLflow UI (3.17) opens the project's experiments: the tags every experiment gets.

- `mlflow.experimentKind = custom_model_development`: MLflow's experiment-kind tag for model-training experiments.
  MLflow 3.17's UI does not read it when it opens an experiment: the sidebar's workflow switch ("GenAI" | "Model
  training", remembered by the browser, "GenAI" at first) decides, and on "GenAI" an experiment opens on its traces
  overview. Later MLflow releases switch the workflow to the experiment's kind; the tag is there for them, and it files
  the experiments under "Model training" in the list. One click on "Model training" (once per browser) and an
  experiment opens on its runs table (`docs/DECISIONS.md`, "MLflow UI").
- A saved view of the runs table, `RUNS_VIEW_NAME`, whose columns are the main metrics (OA, BWT, FWT, FWT last row)
  and the cost: MLflow 3.17 keeps saved views as experiment tags (`mlflow.sharedViewState.<id>` = {"name",
  "createdAt", "updatedAt", "state"}, `state` the JSON of the runs page's columns and filters), so a client can write
  one. It is listed under "Views" on the runs table, and `view_url` opens it.
- `mlflow.note.content`: the experiment's description, which says the above where the UI shows it."""

from __future__ import annotations

import json
import time

EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow 3.17's saved views of the runs table
VIEW_URL_PARAM = "viewStateShareKey"
RUNS_VIEW_ID = "jumplora"
RUNS_VIEW_NAME = "JumpLoRA: OA, BWT, FWT, cost"
NOTE_TAG = "mlflow.note.content"
# the runs table's columns in the view: MLflow writes a column as `<params|metrics>.`<key>``
RUNS_VIEW_COLUMNS = (
    "params.`config.method`", "params.`config.seed`", "metrics.`OA`", "metrics.`BWT`", "metrics.`FWT`",
    "metrics.`FWT_last_row`", "metrics.`cost/trainings`", "metrics.`cost/optimizer_steps`",
    "metrics.`cost/wall_hours`", "metrics.`cost/device_hours`",
)
NOTE = (f"JumpLoRA runs, one parent run per continual run (a child per task). In the MLflow UI choose **Model "
        f"training** at the top of the sidebar (once per browser) to open experiments on their runs table, then the "
        f"view **{RUNS_VIEW_NAME}** under *Views* for the main metrics as columns.")


def runs_view(now_ms: int | None = None) -> str:
    """The saved view's tag value: the runs table with `RUNS_VIEW_COLUMNS`, newest runs first."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    state = {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False, "startTime": "ALL",
             "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
             "selectedColumns": list(RUNS_VIEW_COLUMNS), "columnOrder": list(RUNS_VIEW_COLUMNS)}
    return json.dumps({"name": RUNS_VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(state)})


def experiment_tags() -> dict[str, str]:
    """The tags every experiment of the project gets (at creation; an older experiment gets the missing ones)."""
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG_PREFIX + RUNS_VIEW_ID: runs_view(), NOTE_TAG: NOTE}


def view_url(server: str, experiment_id: str) -> str:
    """The address of the experiment's runs table in the saved view, on an MLflow server at `server`."""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?{VIEW_URL_PARAM}={RUNS_VIEW_ID}"
