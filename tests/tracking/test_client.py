"""The MLflow client: a dead server costs one warning line; a run logged again reattaches, `replace` starts over."""

import logging

from mlflow import MlflowClient

from jumplora import tracking
from tests.servers import fake_server
from tests.tracking.conftest import runs_of


def test_a_dead_server_costs_one_warning_line_and_nothing_else(tracked, capsys):
    results = tracked.run_results(tracked.main_dir)
    tracker = tracking.Tracker("http://127.0.0.1:9")  # nothing listens on port 9
    assert tracking.log_completed_run(tracker, results, tracked.main_dir, "x", "k") is None
    tracking.log_completed_run(tracker, results, tracked.main_dir, "y", "k2")
    assert not tracker.enabled
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: MLflow tracking at http://127.0.0.1:9 failed")


def test_resume_reattaches_and_overwrite_replaces(tracked, tmp_path):
    """Logging the same run again reattaches (no new runs, no repeated metric values); `replace` (`--overwrite`)
    deletes the old parent and children and starts one fresh parent under the same key."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = tracking.Tracker(uri)
    results = tracked.run_results(tracked.other_dir)
    first = tracking.log_completed_run(tracker, results, None, "r", "key")
    again = tracking.log_completed_run(tracker, results, None, "r", "key")
    assert again.run_id == first.run_id
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("jumplora-order1").experiment_id
    assert len(runs_of(client, experiment_id)) == 1 + len(results.tasks)
    assert len(client.get_metric_history(first.run_id, "seen_test_mean")) == len(results.tasks)
    fresh = tracker.start("jumplora-order1", "r", "key", "run", replace=True)
    assert fresh.run_id != first.run_id and not fresh.finished
    assert [r.info.run_id for r in runs_of(client, experiment_id)] == [fresh.run_id]


def test_a_server_that_dies_after_the_first_contact_costs_one_line(monkeypatch, capsys, caplog):
    """The server answers the first contact (a search of its experiments), then is gone: MLflow's retries log nothing
    (urllib3 warned once per retry), and the one warning line names the failure."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")  # retry at once: the test does not wait
    with fake_server("answering a search only") as url:
        tracker = tracking.Tracker(url)
        assert tracker.client is not None  # asked while the server answers
    with caplog.at_level(logging.INFO):
        assert tracker.experiment("jumplora-order1") is None
    assert not tracker.enabled and tracker.failed
    assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: MLflow tracking at {tracker.uri} failed (")


def test_a_long_failure_is_cut_between_words(capsys):
    tracker = tracking.Tracker("sqlite:///unused.db")
    words = [f"word{i}" for i in range(100)]

    def failing():
        raise RuntimeError(" ".join(words))

    assert tracker._call(failing) is None
    line = capsys.readouterr().err.strip()
    shown = line[line.index("(RuntimeError: ") + len("(RuntimeError: "):line.index(" …)")]
    assert len(shown) <= tracking.client.ERROR_WIDTH and shown.split() == words[:len(shown.split())]
    assert line.endswith(" …); the run goes on without tracking, its local results are unaffected")
