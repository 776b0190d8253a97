"""How the MLflow UI (3.17) opens the project's experiments: the tags every experiment gets, its kind, a saved view
of the runs table and a description (why each, and what was tried in a browser: `docs/DECISIONS.md`, "MLflow UI")."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow 3.17's saved views of the runs table
VIEW_URL_PARAM = "viewStateShareKey"
RUNS_VIEW_ID = "jumplora"
RUNS_VIEW_NAME = "JumpLoRA: metrics, cost"  # whole in the Views menu at 1440 pixels
NOTE_TAG = "mlflow.note.content"
# the view's columns, in order, with their widths: each main metric beside its 95 % interval's bounds
# (`tracking.runs.final_metrics`), then the cost, method and seed; MLflow writes a column as `<params|metrics>.`<key>``
# and keeps the run's name and start time (`CREATED`) pinned before them. Widths in pixels, measured in headless
# Chromium at 1440 × 900 (DECISIONS "MLflow UI"): a header's or a value's text and 24 pixels, a few spare; the method's
# column holds the longest method name, the start time `37 seconds ago`
RUN_NAME, CREATED = "attributes.`Run Name`", "runDateAndNestInfo"
COST = ("cost/trainings", "cost/optimizer_steps", "cost/wall_hours", "cost/device_hours")
METHOD, SEED = "params.`config.method`", "params.`config.seed`"
COLUMN_WIDTHS = {CREATED: 145, **{f"metrics.`{key}{bound}`": width for key, widths in {
    "OA": (70, 78, 84), "LA": (70, 76, 82), "BWT": (70, 88, 96), "FWT": (70, 88, 96),
    "FWT_last_row": (120, 150, 156)}.items() for bound, width in zip(("", "_low", "_high"), widths, strict=True)},
    "metrics.`cost/trainings`": 122, "metrics.`cost/optimizer_steps`": 168, "metrics.`cost/wall_hours`": 133,
    "metrics.`cost/device_hours`": 150, METHOD: 132, SEED: 106}
RUNS_VIEW_COLUMNS = tuple(COLUMN_WIDTHS)[1:]  # all but the pinned start time
# the view's columns as earlier versions wrote them (method and seed first or last, around the main metrics without
# their intervals or LA, and the cost): an experiment holding one gets this view (`missing_tags`); a user's view stays
_EARLIER = [f"metrics.`{key}`" for key in ("OA", "BWT", "FWT", "FWT_last_row", *COST)]
EARLIER_COLUMNS = ([METHOD, SEED, *_EARLIER], [*_EARLIER, METHOD, SEED])
NOTE = (f"JumpLoRA runs, one parent run per continual run (a child per task). In the MLflow UI choose **Model "
        f"training** at the top of the sidebar (once per browser) to open experiments on their runs table, then the "
        f"view **{RUNS_VIEW_NAME}** under *Views* for the main metrics as columns.")


def runs_view() -> str:
    """The saved view's tag value: the runs table with `RUNS_VIEW_COLUMNS`, newest runs first."""
    now_ms = int(time.time() * 1000)
    state = {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False, "startTime": "ALL",
             "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
             "selectedColumns": list(RUNS_VIEW_COLUMNS), "columnOrder": [RUN_NAME, CREATED, *RUNS_VIEW_COLUMNS],
             "columnWidths": COLUMN_WIDTHS}
    return json.dumps({"name": RUNS_VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(state)})


def experiment_tags() -> dict[str, str]:
    """The tags every experiment of the project gets (at creation; an older experiment: `missing_tags`)."""
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG_PREFIX + RUNS_VIEW_ID: runs_view(), NOTE_TAG: NOTE}


def missing_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """Of `experiment_tags`, those an experiment holding `tags` lacks, and the view if it holds the view as an earlier
    version wrote it (`EARLIER_COLUMNS`)."""
    view = VIEW_TAG_PREFIX + RUNS_VIEW_ID
    try:
        earlier = json.loads(json.loads(tags[view])["state"])["selectedColumns"] in EARLIER_COLUMNS
    except (KeyError, TypeError, ValueError):  # none, or not a view this package wrote
        earlier = False
    return {key: value for key, value in experiment_tags().items() if key not in tags or (key == view and earlier)}


def view_url(server: str, experiment_id: str) -> str:
    """The address of the experiment's runs table in the saved view, on an MLflow server at `server`."""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?{VIEW_URL_PARAM}={RUNS_VIEW_ID}"
