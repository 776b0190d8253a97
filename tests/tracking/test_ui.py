"""The MLflow UI in a real browser: `mlflow server` on 127.0.0.1 (one worker, no job execution) on the tracked runs'
store, opened in headless Chromium through Selenium; a screenshot of the run comparison view is kept."""

import json
import shutil
import urllib.parse
from pathlib import Path

import pytest
from mlflow import MlflowClient

from jumplora import tracking
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

    # the experiment's run list shows both runs
    browser.get(f"{mlflow_server}/#/experiments/{experiment.experiment_id}/runs")
    wait_until(lambda: all(n[:12] in page_text(browser) for n in names), 120, "the run list")
    browser.save_screenshot(str(tmp_path / "ui-runs.png"))

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
