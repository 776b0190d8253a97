"""`write_run`, the one writer of a run directory: every file, `results.json` last; without matplotlib, no plots and
one warning."""

import dataclasses
import errno
import hashlib
import json
import logging
import pathlib
import re
import sys

import pytest
import torch

import jumplora
from jumplora import flags, outputs, ownership, plots, uncertainty
from jumplora.errors import WriteError
from jumplora.ownership.checks import replaced_dir, staging_dir
from jumplora.ownership.folders import Owner
from jumplora.results import RunResults
from tests.test_plots import mtl_results, mtl_updates, run_results, run_updates

RUN_FILES = [outputs.UPDATES, outputs.SUMMARY, outputs.ACCURACY_CSV]
PLOTS = [plots.HEATMAP, plots.SPARSITY, plots.OVERLAP, plots.BWT_RADAR]


def payload() -> tuple[RunResults, list[dict[str, torch.Tensor]]]:
    return run_results(), run_updates()


def test_write_run_writes_the_whole_directory_results_json_last(tmp_path, monkeypatch):
    results, updates = payload()
    there_before_results = []
    write_text = outputs.write_text

    def recording(path, text):
        if path.name == outputs.RESULTS:
            there_before_results.extend(sorted(p.name for p in path.parent.iterdir()))
        write_text(path, text)

    monkeypatch.setattr(outputs, "write_text", recording)
    outputs.write_run(tmp_path / "run", results, updates)
    assert there_before_results == sorted(RUN_FILES + PLOTS)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted([*RUN_FILES, *PLOTS, outputs.RESULTS])
    assert json.loads((tmp_path / "run" / outputs.RESULTS).read_text()) == results.to_json()
    assert (tmp_path / "run" / outputs.ACCURACY_CSV).read_text() == outputs.accuracy_csv(results)
    summed = outputs.load_updates(tmp_path / "run" / outputs.UPDATES)
    assert all(torch.equal(summed[m], sum(u[m] for u in updates)) for m in updates[0])


def test_without_matplotlib_no_plots_and_one_warning(tmp_path, monkeypatch, caplog):
    results, updates = payload()
    monkeypatch.delattr(jumplora, "plots")  # `from jumplora import plots` imports again, and that fails
    monkeypatch.setitem(sys.modules, "jumplora.plots", None)
    with caplog.at_level(logging.WARNING, logger=outputs.__name__):
        outputs.write_run(tmp_path, results, updates)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*RUN_FILES, outputs.RESULTS])
    assert [r.getMessage().startswith("no plots") for r in caplog.records] == [True]


def test_summary_prints_fwt_and_its_last_row():
    results, _ = payload()
    assert "FWT n/a (run with --single-task-baselines)" in outputs.format_summary(results)
    assert "FWT last row" not in outputs.format_summary(results)
    text = outputs.format_summary(dataclasses.replace(results, fwt=-10.0, fwt_last_row=-25.0))
    assert "FWT -10.00\n" in text and "FWT last row -25.00 (the authors' script, as the paper's FWT column)" in text


def test_summary_prints_each_number_with_its_interval_and_an_old_run_one_note():
    """Flags of 4 examples a cell: task 1 all right after task 1 and 2 of 4 after task 2, task 2 all right. The cells'
    Wilson intervals in percent, OA's and BWT's bootstrap interval after their values; a run without flags: one
    note."""
    right, half = [True] * 4, [True, True, False, False]
    results = dataclasses.replace(
        mtl_results(), method="inclora", tasks=["a", "b"], accuracy_matrix=[[1.0, None], [0.5, 1.0]], oa=75.0,
        bwt=-50.0, sparsity=[{"overall": 0.0}] * 2,
        test_flags=[[flags.pack(right)], [flags.pack(half), flags.pack(right)]])
    assert outputs.format_summary(results).count(uncertainty.NO_FLAGS) == 1  # no intervals recorded yet
    results.intervals = uncertainty.run_intervals(results).to_json()
    lines = outputs.format_summary(results).splitlines()
    wilson = [uncertainty.wilson(k, 4).text(100) for k in (4, 2)]  # [51.0, 100.0], [15.0, 85.0]
    assert lines[lines.index("95 % Wilson interval of each test cell (%):") + 1:][:2] == [
        f"a  {wilson[0]} -", f"b  {wilson[1]} {wilson[0]}"]
    # by hand: k right of task 1's 4 resampled examples, k ~ Binomial(4, 1/2), P(k = 0) = P(k = 4) = 1/16 > 2.5 %;
    # task 2 right in every resample: OA = (100·k/4 + 100)/2 ∈ [50, 100], BWT = 100·k/4 − 100 ∈ [−100, 0]
    assert "OA  75.00 [50.0, 100.0]" in lines and "BWT -50.00 [-100.0, 0.0]" in lines
    assert uncertainty.NO_FLAGS not in lines


def test_summary_prints_the_learning_accuracy_beside_bwt_with_its_interval():
    """The diagonal [0.8, 0.6] (4 of 5 and 3 of 5 right just after learning each task): learning accuracy 70.00, with
    its bootstrap interval; a results.json written before it was recorded (no `la`, no flags): from the matrix."""
    diagonal = [[True] * 4 + [False], [True] * 3 + [False] * 2]
    results = dataclasses.replace(
        mtl_results(), method="inclora", tasks=["a", "b"], accuracy_matrix=[[0.8, None], [0.4, 0.6]], oa=50.0,
        bwt=-40.0, sparsity=[{"overall": 0.0}] * 2, la=None)
    old = outputs.format_summary(results).splitlines()
    assert "LA  70.00 (learning accuracy: each task's accuracy right after it was learned, the diagonal)" in old
    results.la = 70.0
    results.test_flags = [[flags.pack(diagonal[0])], [flags.pack([True, True, False, False, False]),
                                                      flags.pack(diagonal[1])]]
    results.intervals = uncertainty.run_intervals(results).to_json()
    interval = uncertainty.RunIntervals.from_json(results.intervals).metrics["la"]
    assert interval.low < 70.0 < interval.high  # (100·k₁/5 + 100·k₂/5) / 2 over the resampled tasks
    lines = outputs.format_summary(results).splitlines()
    assert f"LA  70.00 {interval.text()} (learning accuracy: each task's accuracy right after it was learned, " \
           "the diagonal)" in lines
    assert lines.index(f"LA  70.00 {interval.text()} (learning accuracy: each task's accuracy right after it was "
                       "learned, the diagonal)") == lines.index(f"BWT -40.00 {results_interval(results, 'bwt')}") - 1
    assert "LA  – (MTL)" in outputs.format_summary(mtl_results())


def test_the_matrix_heads_its_columns_with_the_task_names_whole_up_to_twelve_characters():
    """A column as wide as its task's name (at least a cell's five characters), a cell right-aligned under it; a name
    longer than 12 characters cut to 11 and `…`."""
    results = dataclasses.replace(
        mtl_results(), method="inclora", tasks=["sst-2", "multirc", "a_plugins_long_task"],
        accuracy_matrix=[[0.5, None, None], [0.25, 0.75, None], [0.125, 0.5, 1.0]], majority_baseline=[0.5, 0.25, 0.5],
        oa=54.17, bwt=-31.25, sparsity=[{"overall": 0.0}] * 3)
    lines = outputs.format_summary(results).splitlines()
    start = lines.index("test accuracy (%) after each task (rows) on each task (columns):") + 1
    assert lines[start:start + 5] == [
        "                     sst-2 multirc a_plugins_l…",
        "sst-2                 50.0     -            -  ",
        "multirc               25.0    75.0          -  ",
        "a_plugins_long_task   12.5    50.0        100.0",
        "majority              50.0    25.0         50.0"]


def results_interval(results: RunResults, metric: str) -> str:
    return uncertainty.RunIntervals.from_json(results.intervals).metrics[metric].text()


def test_an_mtl_run_directory_prints_no_bwt_or_fwt_and_has_no_radar(tmp_path):
    """MTL (one training on all tasks): one matrix row named after the method, BWT and FWT `–`, no BWT radar."""
    results, updates = mtl_results(), mtl_updates()
    outputs.write_run(tmp_path, results, updates)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*RUN_FILES, *PLOTS[:3], outputs.RESULTS])
    text = (tmp_path / outputs.SUMMARY).read_text()
    assert "BWT –\n" in text and "FWT – (MTL trains once on all the tasks: no BWT or FWT)" in text
    assert "OA  65.00" in text and "--single-task-baselines" not in text
    assert "after the one training (row) on each task (columns):" in text
    assert "\n         dbpedia amazon yahoo\nmtl         50.0   70.0  75.0\n" in text  # each column its name's width
    assert "sparsity of ΔW_final per training (%): " in text
    assert (tmp_path / outputs.ACCURACY_CSV).read_text().splitlines()[1:] == [
        "test,mtl,0.5,0.7,0.75", "dev,mtl,0.5,0.7,0.75"]


@pytest.mark.parametrize(("failing", "code", "cause"), [
    (outputs.RESULTS, errno.ENOSPC, "No space left on device: free some space or write elsewhere"),
    (outputs.SUMMARY, errno.EROFS, "Read-only file system: the file system is read-only: write elsewhere"),
    (plots.OVERLAP, errno.EACCES, "Permission denied: write to a directory you may write to"),
])
def test_a_failed_write_is_one_error_naming_the_file_and_leaves_nothing_partial(failing, code, cause, tmp_path,
                                                                             monkeypatch):
    """The write of one file fails (as a full disk, a read-only file system or a lost permission would make it
    fail), in a run directory written through its `Target`: no partial file, no aside file, no results.json; what
    was there before stays, and the record names exactly the complete files written before the failure."""
    results, updates = payload()
    out = tmp_path / "run"
    out.mkdir()
    (out / "kept.txt").write_text("there before")
    write_text, savefig = pathlib.Path.write_text, plots.plt.Figure.savefig

    def refuse(path):
        if re.fullmatch(rf"\.{re.escape(failing)}\.[0-9a-f]{{8}}\.tmp", pathlib.Path(path).name):
            raise OSError(code, "refused", str(path))

    monkeypatch.setattr(pathlib.Path, "write_text", lambda self, *a, **k: refuse(self) or write_text(self, *a, **k))
    monkeypatch.setattr(plots.plt.Figure, "savefig", lambda self, path, **k: refuse(path) or savefig(self, path, **k))
    with pytest.raises(WriteError) as error, ownership.Target(out, ownership.RUN, "jumplora run", "--out") as target:
        outputs.write_run(target.path, results, updates)
    assert str(error.value) == f"cannot write {out / failing}: {cause}"
    left = sorted(p.name for p in out.iterdir())
    assert (out / "kept.txt").read_text() == "there before" and outputs.RESULTS not in left
    assert not [name for name in left if name.endswith(".tmp")]
    record = json.loads((out / ownership.MARKER).read_text())
    assert record["aside"] == [] and sorted(record["record"]) == sorted(set(left) - {"kept.txt", ownership.MARKER})
    assert all(hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
               for name, digest in record["record"].items())


def recorded(folder: pathlib.Path, files: dict[str, str]) -> None:
    """A folder of the run kind whose record names `files` (name: text), as the product writes one."""
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    digests = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()}
    (folder / ownership.MARKER).write_text(Owner("run", "jumplora run", files=digests).text())


@pytest.mark.parametrize("new_complete", [True, False])
def test_a_swap_cut_between_its_renames_is_completed_at_the_next_start(new_complete, tmp_path):
    """`--overwrite` moves the old run aside, then the new one in place; cut in between, the next start puts the new
    run in place if it is complete, else the old one back, and clears the other by its record."""
    from jumplora.ownership.target import finish_swap

    out = tmp_path / "run"
    recorded(replaced_dir(out), {outputs.RESULTS: "old"})
    recorded(staging_dir(out), {(outputs.RESULTS if new_complete else outputs.SUMMARY): "new"})
    finish_swap(out, ownership.RUN)
    expected = {outputs.RESULTS: "new"} if new_complete else {outputs.RESULTS: "old"}
    assert {p.name: p.read_text() for p in out.iterdir() if p.name != ownership.MARKER} == expected
    assert not replaced_dir(out).exists()
    assert staging_dir(out).exists() != new_complete  # an incomplete staging waits for --overwrite
