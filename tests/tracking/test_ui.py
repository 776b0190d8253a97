"""The MLflow UI in a real browser: `mlflow server` on 127.0.0.1 (one worker, no job execution) on the tracked runs'
store, opened in headless Chromium through Selenium as a new user would: "Model training" in the sidebar, a click on
the experiment (its runs table), the saved view of the main metrics at 1440 × 900 (OA and its interval in view, every
column's header and values whole, the method's column wide enough for the longest method name; a screenshot is kept),
the run comparison view (a screenshot is kept), the experiment's Models tab: the runs' final merged models with OA,
BWT and the cost as columns."""

import html
import json
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest
from mlflow import MlflowClient

from jumplora import tracking
from jumplora.methods import METHODS
from jumplora.tracking import ui
from tests.tracking.conftest import serving, wait_until

REPO = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOT_COPY = REPO / "runs" / "ui-screenshot.png"


@pytest.fixture
def mlflow_server(tracked, tmp_path):
    with serving(tracked.uri, tmp_path / "artifacts", tmp_path / "mlflow-server.log") as (url, _):
        yield url


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium / chromium-driver are not installed (`make install` installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1800,2400"):
        options.add_argument(argument)
    from selenium.webdriver.chrome.service import Service

    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver) -> str:
    return driver.find_element("tag name", "body").text


@pytest.mark.timeout(900)
def test_runs_and_oa_in_the_mlflow_ui(tracked, mlflow_server, browser, tmp_path):
    client = MlflowClient(tracked.uri)
    experiment = client.get_experiment_by_name("jumplora-order1")
    parents = [r for r in client.search_runs([experiment.experiment_id])
               if r.data.tags[tracking.KIND_TAG] == "run"]
    names = sorted(r.info.run_name for r in parents)
    assert names == sorted([tracked.main_dir.name, tracked.other_dir.name])
    # MLflow's experiment-kind tag for model training, and the saved view of the runs table with the main metrics
    assert experiment.tags[ui.EXPERIMENT_KIND_TAG] == "custom_model_development"
    view = json.loads(experiment.tags[ui.VIEW_TAG_PREFIX + ui.RUNS_VIEW_ID])
    assert view["name"] == ui.RUNS_VIEW_NAME
    assert "metrics.`FWT_last_row`" in json.loads(view["state"])["selectedColumns"]

    # as a new user: the experiment list, "Model training" in the sidebar (MLflow 3.17 opens an experiment as that
    # switch says: GenAI traces at first), a click on the experiment: its runs table, both runs in it
    browser.get(f"{mlflow_server}/#/experiments")
    wait_until(lambda: browser.find_elements("link text", "jumplora-order1"), 120, "the experiment list")
    browser.find_element("xpath", "//*[normalize-space(text())='Model training']").click()
    wait_until(lambda: browser.execute_script("return localStorage.getItem('mlflow.workflowType_v1')"), 30,
               "the workflow switch")
    browser.find_element("link text", "jumplora-order1").click()
    wait_until(lambda: f"/experiments/{experiment.experiment_id}/runs" in browser.current_url
               and all(n[:12] in page_text(browser) for n in names), 120, "the runs table on opening the experiment")
    assert "Detect Issues" not in page_text(browser)  # not the GenAI overview
    browser.save_screenshot(str(tmp_path / "ui-runs.png"))

    # the saved view on a 1440 × 900 screen: OA and its interval's bounds in view beside the run's name and start
    # time; scrolled across, every column of the view (these runs have no a0, so no FWT), in its order, shows its
    # header and its values whole, and the method's column is wide enough for the registry's longest method name
    browser.set_window_size(1440, 900)
    browser.get(ui.view_url(mlflow_server, experiment.experiment_id))
    wait_until(lambda: all(n[:12] in page_text(browser) for n in names)
               and {ui.RUNS_VIEW_NAME, "OA", "OA_low"} <= set(page_text(browser).splitlines()), 120,
               "the saved view's columns")
    in_view = ["Run Name", "Created", "OA", "OA_low", "OA_high"]
    seen = []

    def columns_in_view():
        headers, right_edge = browser.execute_script(HEADERS)
        seen[:] = [name for name, _, right in sorted(headers, key=lambda h: h[1]) if right <= right_edge]
        return seen[:5] == in_view

    try:  # the view's order and widths are applied once its columns are there
        wait_until(columns_in_view, 30, "OA and its interval in view at 1440 pixels, in the view's order")
    except AssertionError as error:
        raise AssertionError(f"{error}; in view, left to right: {seen}") from None
    browser.save_screenshot(str(tmp_path / "ui-view-1440.png"))
    columns, (room, *widths) = view_columns(browser, LONGEST)
    shown = ["Created", "OA", "OA_low", "OA_high", "LA", "LA_low", "LA_high", "BWT", "BWT_low", "BWT_high",
             "cost/trainings", "cost/optimizer_steps", "cost/wall_hours", "cost/device_hours", "config.method",
             "config.seed"]
    assert [name for name in columns if name in shown] == shown
    assert {name: cut for name, cut in columns.items() if name in shown and cut} == {}
    # the widest method names, written in the method column's cell, within its room (its width less its padding)
    assert max(widths) <= room, (widths, room)
    browser.set_window_size(1800, 2400)

    # the comparison view: both run names, and OA among the compared metrics
    query = urllib.parse.urlencode({"runs": json.dumps([r.info.run_id for r in parents]),
                                    "experiments": json.dumps([experiment.experiment_id])})
    browser.get(f"{mlflow_server}/#/compare-runs?{query}")

    def metrics_shown():
        text = page_text(browser)
        if not all(n in text for n in names) or "\nMetrics\n" not in text:
            return None
        metrics = text.split("\nMetrics\n", 1)[1].split("\nArtifacts\n", 1)[0].splitlines()
        return text if {"OA", "BWT"} <= set(metrics) else None

    text = wait_until(metrics_shown, 120, "the comparison view with the run names and OA")
    assert "Comparing 2 Runs" in text
    screenshot = tmp_path / "ui-compare.png"
    assert browser.save_screenshot(str(screenshot))
    from PIL import Image

    with Image.open(screenshot) as image:
        assert image.width >= 1200 and image.height >= 1200
    SCREENSHOT_COPY.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(screenshot, SCREENSHOT_COPY)

    # the Models tab: a row per run's final model (a LoggedModel), its metric columns the run's OA, BWT and cost;
    # the grid renders only the columns in view: it is scrolled across, each column read by its id
    browser.get(f"{mlflow_server}/#/experiments/{experiment.experiment_id}/models")
    metrics = ["OA", "BWT", "cost/trainings", "cost/optimizer_steps"]
    rows = wait_until(lambda: (found := model_rows(browser)) and len(found) == 2
                      and all(set(metrics) <= set(row) for row in found) and found, 120, "the Models tab's rows")
    by_run = {row["Source run"]: row for row in rows}
    assert sorted(by_run) == names
    for version, run_dir in enumerate((tracked.main_dir, tracked.other_dir), start=1):
        results, row = tracked.results(run_dir), by_run[run_dir.name]
        assert float(row["OA"]) == pytest.approx(results["oa"], abs=0.01)
        assert float(row["BWT"]) == pytest.approx(results["bwt"], abs=0.01)
        assert (float(row["cost/trainings"]), float(row["cost/optimizer_steps"])) == (2, 6)
        assert row["Registered models"].split() == ["demo", f"v{version}"]  # the version made from it
    browser.save_screenshot(str(tmp_path / "ui-models.png"))


# the runs table's column headers (text, left and right edge in pixels) and the right edge of its grid
HEADERS = """
const heads = [...document.querySelectorAll('.ag-header-cell[col-id]')].map(e => {
  const box = e.getBoundingClientRect();
  return [e.innerText.trim(), box.left, box.right];
}).filter(h => h[0]);
return [heads, document.querySelector('.ag-root-wrapper').getBoundingClientRect().right];
"""


# the registry's longest method name and the one the issue saw cut (`jumplora+…`)
LONGEST = [max(METHODS, key=len), "jumplora+ella"]
# one view of the runs table: each column's header (its text, whether it is cut, its place) and each cell's (whether
# its text is wider than the cell's room), the method column's room and the width there of each name given
# (arguments[0]), then a scroll to the right
VIEW_CELLS = """
const heads = {}, cut = {}, method = [];
document.querySelectorAll('.ag-header-cell[col-id]').forEach(e => {
  const span = e.querySelector('span[data-testid^="sort-header-"]');
  if (span) heads[e.getAttribute('col-id')] = [span.innerText.trim(),
                                               span.parentElement.scrollWidth > span.parentElement.clientWidth,
                                               Number(e.getAttribute('aria-colindex'))];
});
document.querySelectorAll('.ag-center-cols-container .ag-cell[col-id], .ag-pinned-left-cols-container '
                           + '.ag-cell[col-id="runDateAndNestInfo"]').forEach(c => {
  const style = getComputedStyle(c), text = document.createRange();
  text.selectNodeContents(c);
  const room = c.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const id = c.getAttribute('col-id');
  cut[id] = (cut[id] || false) || text.getBoundingClientRect().width > room;
  if (id === 'params.`config.method`' && !method.length) {  // the names given, in a copy of the cell's text element
    const leaf = [...c.querySelectorAll('*')].filter(e => !e.children.length && e.textContent).pop() || c;
    const probe = leaf.cloneNode();
    leaf.parentElement.appendChild(probe);
    method.push(room, ...arguments[0].map(name => {
      probe.textContent = name;
      const range = document.createRange();
      range.selectNodeContents(probe);
      return range.getBoundingClientRect().width;
    }));
    probe.remove();
  }
});
const bar = document.querySelector('.ag-body-horizontal-scroll-viewport');
const at = bar.scrollLeft;
bar.scrollLeft = at + bar.clientWidth / 2;
bar.dispatchEvent(new Event('scroll'));
return [heads, cut, method, at, bar.scrollLeft];
"""


def view_columns(browser, names: list[str]) -> tuple[dict[str, bool], list[float]]:
    """The runs table's columns left to right, each header's text with whether the header or any of its cells is cut,
    read while scrolling it across; and the method column's room and the width `names` take in it."""
    heads, cut, method = {}, {}, []
    for _ in range(50):
        found, cells, probe, before, after = browser.execute_script(VIEW_CELLS, names)
        heads.update(found)
        for column, value in cells.items():
            cut[column] = cut.get(column, False) or value
        method = probe or method
        if after == before:
            break
        time.sleep(0.3)
    order = sorted(heads, key=lambda column: heads[column][2])  # the rendered columns are in no order
    return {heads[column][0]: heads[column][1] or cut.get(column, False) for column in order}, method


def test_the_saved_view_lists_the_main_metrics_and_the_cost_first():
    state = json.loads(json.loads(ui.runs_view())["state"])
    columns = ["metrics.`OA`", "metrics.`OA_low`", "metrics.`OA_high`", "metrics.`LA`", "metrics.`LA_low`",
               "metrics.`LA_high`", "metrics.`BWT`", "metrics.`BWT_low`", "metrics.`BWT_high`", "metrics.`FWT`",
               "metrics.`FWT_low`", "metrics.`FWT_high`", "metrics.`FWT_last_row`", "metrics.`FWT_last_row_low`",
               "metrics.`FWT_last_row_high`", "metrics.`cost/trainings`", "metrics.`cost/optimizer_steps`",
               "metrics.`cost/wall_hours`", "metrics.`cost/device_hours`", "params.`config.method`",
               "params.`config.seed`"]
    assert state["selectedColumns"] == columns
    assert state["columnOrder"] == ["attributes.`Run Name`", "runDateAndNestInfo", *columns]
    # every column but the pinned run name gets a width; OA and its bounds fit the 410 pixels a 1440-pixel screen
    # leaves beside the pinned columns (70 + 78 + 84)
    widths = state["columnWidths"]
    assert set(widths) == {"runDateAndNestInfo", *columns} and sum(widths.values()) == 2350
    assert sum(widths[column] for column in columns[:3]) == 232


def test_an_experiment_holding_the_earlier_view_gets_this_one_and_a_view_a_user_saved_stays():
    view = ui.VIEW_TAG_PREFIX + ui.RUNS_VIEW_ID
    earlier = json.dumps({"name": ui.RUNS_VIEW_NAME, "createdAt": 1, "updatedAt": 1, "state": json.dumps({
        "selectedColumns": ["params.`config.method`", "params.`config.seed`", "metrics.`OA`", "metrics.`BWT`",
                            "metrics.`FWT`", "metrics.`FWT_last_row`", "metrics.`cost/trainings`",
                            "metrics.`cost/optimizer_steps`", "metrics.`cost/wall_hours`",
                            "metrics.`cost/device_hours`"]})})
    users = json.dumps({"name": ui.RUNS_VIEW_NAME, "state": json.dumps({"selectedColumns": ["metrics.`OA`"]})})
    others = {ui.EXPERIMENT_KIND_TAG: ui.EXPERIMENT_KIND, ui.NOTE_TAG: ui.NOTE}
    assert list(ui.missing_tags({**others, view: earlier})) == [view]
    # the view as the version before wrote it: the main metrics without their intervals, the method and seed last
    before = json.dumps({"name": "JumpLoRA: OA, BWT, FWT, cost", "createdAt": 1, "updatedAt": 1, "state": json.dumps({
        "selectedColumns": ["metrics.`OA`", "metrics.`BWT`", "metrics.`FWT`", "metrics.`FWT_last_row`",
                            "metrics.`cost/trainings`", "metrics.`cost/optimizer_steps`", "metrics.`cost/wall_hours`",
                            "metrics.`cost/device_hours`", "params.`config.method`", "params.`config.seed`"]})})
    assert json.loads(ui.missing_tags({**others, view: before})[view])["name"] == "JumpLoRA: metrics, cost"
    assert json.loads(json.loads(ui.missing_tags({view: earlier})[view])["state"])["selectedColumns"][0] == \
        "metrics.`OA`"
    assert ui.missing_tags({**others, view: users}) == {}
    assert sorted(ui.missing_tags({})) == sorted([ui.EXPERIMENT_KIND_TAG, ui.NOTE_TAG, view])


# one view of the Models tab's grid: its headers and the cells of each row by column id, then a scroll to the right
GRID_VIEW = """
const heads = {}, rows = {};
document.querySelectorAll('.ag-header-cell[col-id]').forEach(
  e => heads[e.getAttribute('col-id')] = e.innerText.trim());
document.querySelectorAll('.ag-center-cols-container .ag-row[row-index]').forEach(r => {
  const cells = rows[r.getAttribute('row-index')] = {};
  r.querySelectorAll('.ag-cell[col-id]').forEach(c => cells[c.getAttribute('col-id')] = c.innerText.trim());
});
const bar = document.querySelector('.ag-body-horizontal-scroll-viewport');
const at = bar ? bar.scrollLeft : 0;
if (bar) { bar.scrollLeft = at + bar.clientWidth / 2; bar.dispatchEvent(new Event('scroll')); }
return [heads, rows, at, bar ? bar.scrollLeft : 0];
"""


def model_rows(browser) -> list[dict[str, str]] | None:
    """The rows of the Models tab's grid (its centre block: Logged from, Source run, Registered models, Dataset, the
    metrics), each as {column header: text}, read while scrolling it from left to right."""
    heads, rows = {}, {}
    for _ in range(50):
        found, cells, before, after = browser.execute_script(GRID_VIEW)
        heads.update(found)
        for index, row in cells.items():
            rows.setdefault(index, {}).update({html.unescape(column): text for column, text in row.items()})
        if after == before:
            break
        time.sleep(0.3)
    browser.execute_script("const bar = document.querySelector('.ag-body-horizontal-scroll-viewport'); "
                           "if (bar) { bar.scrollLeft = 0; bar.dispatchEvent(new Event('scroll')); }")
    return [{heads.get(column, column): text for column, text in row.items()} for row in rows.values()] or None
