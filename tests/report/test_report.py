"""`jumplora report` on two methods × two seeds × orders 1 to 3 equals a hand computation of mean ± sample std."""

import json
import os
from pathlib import Path
from statistics import NormalDist

import pytest

from jumplora import flags, metrics
from jumplora.cli import main
from jumplora.uncertainty import NO_FLAGS

# (method, order, seed): (a[0][0], a[1][0], a[1][1], a0) for a two-task order; FWT last row = mean_j a[1][j] − a0[j]
RUNS = {
    ("inclora", 1, 42): (0.8, 0.5, 0.7, [0.9, 0.8]),  # OA 60, BWT −30, FWT −10, last row −25
    ("inclora", 1, 43): (0.9, 0.6, 0.68, [0.9, 0.7]),  # OA 64, BWT −30, FWT −1, last row −16
    ("inclora", 2, 42): (0.7, 0.4, 0.6, [0.8, 0.6]),  # OA 50, BWT −30, FWT −5, last row −20
    ("inclora", 2, 43): (0.8, 0.5, 0.66, [0.8, 0.7]),  # OA 58, BWT −30, FWT −2, last row −17
    ("jumplora+ella", 1, 42): (0.8, 0.78, 0.8, [0.8, 0.8]),  # OA 79, BWT −2, FWT 0, last row −1
    ("jumplora+ella", 1, 43): (0.9, 0.85, 0.75, [0.9, 0.8]),  # OA 80, BWT −5, FWT −2.5, last row −5
    ("jumplora+ella", 2, 42): (0.7, 0.7, 0.7, [0.7, 0.7]),  # OA 70, BWT 0, FWT 0, last row 0
    ("jumplora+ella", 2, 43): (0.8, 0.76, 0.8, [0.7, 0.8]),  # OA 78, BWT −4, FWT 5, last row 3
    # order 3: each entry the mean of the seed's orders 1 and 2 (every metric is linear in them), so each metric the
    # mean of theirs, and SC (orders 1, 2, 3) per seed the mean of orders 1 and 2
    ("inclora", 3, 42): (0.75, 0.45, 0.65, [0.85, 0.7]),  # OA 55, BWT −30, FWT −7.5, last row −22.5
    ("inclora", 3, 43): (0.85, 0.55, 0.67, [0.85, 0.7]),  # OA 61, BWT −30, FWT −1.5, last row −16.5
    ("jumplora+ella", 3, 42): (0.75, 0.74, 0.75, [0.75, 0.75]),  # OA 74.5, BWT −1, FWT 0, last row −0.5
    ("jumplora+ella", 3, 43): (0.85, 0.805, 0.775, [0.8, 0.8]),  # OA 79, BWT −4.5, FWT 1.25, last row −1
}
# what a run the paper's numbers can stand beside records: the real benchmark, a hub model, no caps
REAL = {"data_dir": "/data/CL_Benchmark", "model": "google-t5/t5-large"}


def write_run(directory, method, order, seed, diagonal0, last0, last1, a0, config=None):
    """A run's results.json; seed 43's as written before `fwt_last_row` was recorded (the report computes it from
    the matrix and a0). `config`: what it records beside its method's settings (none: the synthetic benchmark and
    the tiny model, whose numbers stand beside no paper figure)."""
    matrix = [[diagonal0, None], [last0, last1]]
    results = {"order": order, "method": method, "seed": seed, "tasks": ["t1", "t2"],
               "config": {"threshold": "global", "ella_delta": "sparse", **(config or {})}, "accuracy_matrix": matrix,
               "single_task_accuracy": a0, "oa": metrics.overall_accuracy(matrix),
               "bwt": metrics.backward_transfer(matrix), "fwt": metrics.forward_transfer(matrix, a0)}
    if seed != 43:
        results["fwt_last_row"] = metrics.forward_transfer_last_row(matrix, a0)
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results))


def test_report_tables_equal_a_hand_computation(tmp_path, capsys):
    for (method, order, seed), (d0, l0, l1, a0) in RUNS.items():
        write_run(tmp_path / "runs" / f"{method}-o{order}-s{seed}" / "run", method, order, seed, d0, l0, l1, a0, REAL)
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary = json.loads((out / "report.json").read_text())
    # hand computation: mean and sample std (ddof = 1) of two values x, y are (x+y)/2 and |x−y|/√2
    s2 = 2 ** 0.5
    expected_oa = {  # order 3 and SC per seed: inclora 55, 61; jumplora+ella 74.5, 79
        "inclora": {"1": (62.0, 4 / s2), "2": (54.0, 8 / s2), "3": (58.0, 6 / s2), "sc": (58.0, 6 / s2)},
        "jumplora+ella": {"1": (79.5, 1 / s2), "2": (74.0, 8 / s2), "3": (76.75, 4.5 / s2), "sc": (76.75, 4.5 / s2)},
    }
    expected_transfer = {  # last row per seed: inclora −22.5, −16.5; jumplora+ella −0.5, −1
        "inclora": {"bwt": (-30.0, 0.0), "fwt": (-4.5, 6 / s2), "fwt_last_row": (-19.5, 6 / s2)},  # FWT −7.5, −1.5
        "jumplora+ella": {"bwt": (-2.75, 3.5 / s2), "fwt": (0.625, 1.25 / s2),  # BWT −1, −4.5; FWT 0, 1.25
                          "fwt_last_row": (-0.75, 0.5 / s2)},
    }
    assert summary["methods"] == ["inclora", "jumplora+ella"] and summary["benchmarks"] == {"sc": [1, 2, 3]}
    for method, columns in expected_oa.items():
        for column, (mean, std) in columns.items():
            cell = summary["oa"][method][column]
            assert (cell["mean"], cell["std"], cell["n"]) == (pytest.approx(mean), pytest.approx(std), 2)
    for method, by_metric in expected_transfer.items():
        for metric, (mean, std) in by_metric.items():
            cell = summary["transfer"][method]["sc"][metric]
            assert (cell["mean"], cell["std"]) == (pytest.approx(mean), pytest.approx(std, abs=1e-9))

    # beside the paper's numbers (search_spaces/paper_results.yaml), as Markdown and HTML with the plots
    text = (out / "report.md").read_text()
    assert capsys.readouterr().out.startswith(text)
    assert ("| inclora | 62.00 ± 2.83 (paper 59.25) | 54.00 ± 5.66 (paper 58.69) | 58.00 ± 4.24 (paper 69.86) | "
            "58.00 ± 4.24 (paper 62.60) |") in text
    assert "| method | O1 | O2 | O3 | SC (orders 1,2,3) |" in text
    assert summary["paper_notes"] == [] and "No paper figures" not in text
    # the paper's FWT (−0.8) stands beside FWT last row, not beside SPEC's FWT; the heading says so
    assert "| inclora | -30.00 ± 0.00 (paper -22.90) | -4.50 ± 4.24 | -19.50 ± 4.24 (paper -17.10) |" in text
    assert "| jumplora+ella | -2.75 ± 2.47 (paper -1.90) |" in text
    assert "| method | BWT SC | FWT SC | FWT last row SC |" in text
    assert "the paper's FWT beside FWT last row" in text and "the paper's FWT is shown beside FWT last row" in text
    assert summary["runs"][0]["fwt_last_row"] == pytest.approx(-25.0)  # inclora, order 1, seed 42
    # written before flags were kept: no intervals, said once
    assert text.count(NO_FLAGS) == 1 and f"12 of 12 runs: {NO_FLAGS}" in text and summary["comparisons"] == []
    page = (out / "report.html").read_text()
    assert page.count("<img ") == 4 and "62.00 ± 2.83 (paper 59.25)" in page  # OA bars + one radar per order
    assert (out / "oa_by_method.png").stat().st_size > 1000 and (out / "bwt_radar_order3.png").exists()


def write_good_runs(root):
    for seed in (42, 43):
        write_run(root / f"inclora-s{seed}", "inclora", 1, seed, 0.8, 0.5, 0.7, [0.9, 0.8])


DAMAGED = {
    "truncated": ('{"order": 1, "method": "incl', "is not readable JSON"),
    "missing method": (json.dumps({"order": 1, "seed": 42, "oa": 60.0, "bwt": -30.0}), "lacks 'method'"),
    "not an object": ("[1, 2]", "does not hold a JSON object"),
    "wrong type": (json.dumps({"order": "one", "method": "inclora", "seed": 42, "oa": 60.0, "bwt": -30.0}),
                   "holds a value of the wrong type"),
    "diverged": ('{"order": 1, "method": "inclora", "seed": 42, "oa": 0.0, "bwt": 0.0, "thresholds": [{"g": NaN}]}',
                 "holds a number that is not finite (thresholds[0].g = nan): its training diverged"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_file_named_directly_is_one_error_line(case, tmp_path, capsys):
    content, message = DAMAGED[case]
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(content)
    for source in (run, run / "results.json"):
        assert main(["report", str(source), "--out", str(tmp_path / "report")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"jumplora: error: {run / 'results.json'} {message}")
        assert err.rstrip().endswith(": fix the file or leave its run out of the sources")
    assert not (tmp_path / "report").exists()


def test_damaged_files_in_a_folder_are_skipped_with_a_warning_each(tmp_path, capsys):
    write_good_runs(tmp_path / "runs")
    messages = {}
    for case, (content, message) in DAMAGED.items():
        path = tmp_path / "runs" / case.replace(" ", "-") / "results.json"
        path.parent.mkdir()
        path.write_text(content)
        messages[path] = message
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    warnings = capsys.readouterr().err.splitlines()
    for line, path in zip(warnings, sorted(messages), strict=True):
        assert line.startswith(f"warning: skipped {path} {messages[path]}")
    assert [run["seed"] for run in json.loads((tmp_path / "report" / "report.json").read_text())["runs"]] == [42, 43]


def test_a_folder_of_damaged_files_only_is_an_error(tmp_path, capsys):
    (tmp_path / "runs" / "bad").mkdir(parents=True)
    (tmp_path / "runs" / "bad" / "results.json").write_text("{")
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: skipped {tmp_path / 'runs' / 'bad' / 'results.json'} is not readable JSON")
    assert err[1:] == [f"jumplora: error: {tmp_path / 'runs'} holds no usable results.json (1 damaged, see the "
                       "warnings)"]
    assert not (tmp_path / "report").exists()


def write_mtl_run(directory, order, seed, row):
    """An MTL run's results.json: one training on all tasks, one row of accuracies, no BWT / FWT (null)."""
    results = {"order": order, "method": "mtl", "seed": seed, "tasks": ["t1", "t2"], "config": {},
               "accuracy_matrix": [row], "single_task_accuracy": None, "oa": 100 * sum(row) / len(row),
               "bwt": None, "fwt": None, "fwt_last_row": None}
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results))


def test_reference_baselines_in_registry_order_beside_the_paper_and_mtl_without_transfer(tmp_path, monkeypatch):
    from jumplora import plots

    runs = tmp_path / "runs"
    write_run(runs / "inclora-s42", "inclora", 1, 42, *RUNS["inclora", 1, 42], REAL)  # OA 60, BWT −30
    write_run(runs / "ewc-s42", "ewc", 1, 42, 0.8, 0.5, 0.7, [0.9, 0.8], REAL)  # OA 60, BWT −30, FWT −10, last −25
    write_run(runs / "ewc-s43", "ewc", 1, 43, 0.9, 0.6, 0.68, [0.9, 0.7], REAL)  # OA 64, BWT −30, FWT −1, last −16
    write_mtl_run(runs / "mtl-s42", 1, 42, [0.7, 0.9])  # OA 80
    write_mtl_run(runs / "mtl-s43", 1, 43, [0.6, 0.8])  # OA 70
    radar_labels = []
    bwt_radar = plots.bwt_radar
    monkeypatch.setattr(plots, "bwt_radar", lambda traces, path: radar_labels.extend(label for label, _ in traces)
                        or bwt_radar(traces, path))
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    summary = json.loads((out / "report.json").read_text())
    text = (out / "report.md").read_text()
    # the registry's order (the paper's four, then SPEC §7's baselines), not the alphabet
    assert summary["methods"] == ["inclora", "ewc", "mtl"]
    assert [(r["method"], r["seed"]) for r in summary["runs"]] == [("inclora", 42), ("ewc", 42), ("ewc", 43),
                                                                   ("mtl", 42), ("mtl", 43)]
    # EWC's OA beside the paper's (SPEC §6: O1 46.30; order 1 alone: no SC column); the paper has no EWC BWT / FWT:
    # no "(paper –)"
    assert "| method | O1 |\n" in text and "| ewc | 62.00 ± 2.83 (paper 46.30) |\n" in text
    assert "| ewc | -30.00 ± 0.00 | -5.50 ± 6.36 | -20.50 ± 6.36 |" in text
    assert "(paper –)" not in text and "nan" not in text
    # MTL: OA only; its BWT, FWT and FWT last row are "–" in the per-benchmark table and in the per-run table
    assert "| mtl | 75.00 ± 7.07 |\n" in text
    assert "| mtl | – | – | – |" in text
    assert "| mtl | 1 | 42 | 80.00 | – | – | – |" in text
    # MTL's runs are synthetic, but the paper has no MTL figure: no line says that none is shown
    assert summary["paper_notes"] == [] and summary["transfer_columns"] == ["1"]
    mtl_bwt = summary["transfer"]["mtl"]["1"]["bwt"]
    assert (mtl_bwt["mean"], mtl_bwt["n"]) == (None, 0) and summary["runs"][3]["bwt"] is None
    # the BWT radar of order 1 has the runs with a BWT only
    assert radar_labels == ["inclora s42", "ewc s42", "ewc s43"]
    assert (out / "bwt_radar_order1.png").exists() and (out / "report.html").read_text().count("<img ") == 2


def test_a_report_of_mtl_runs_only_has_no_radar(tmp_path):
    write_mtl_run(tmp_path / "runs" / "mtl", 1, 42, [0.7, 0.9])
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert "| mtl | 80.00 (n=1) |\n" in (out / "report.md").read_text()
    assert sorted(p.name for p in out.glob("*.png")) == ["oa_by_method.png"]


def test_the_tables_score_unlabelled_rows_as_wrong_and_show_the_cost(tmp_path):
    """A run that dropped MNLI's 131 rows labelled "-" (of 1631) is rescaled to the authors' scoring in the tables
    (each MNLI accuracy × 1500/1631, the a0 rows too), and listed as recorded; its cost stands in a table of its
    own."""
    f = 1500 / 1631
    matrix, own, shared = [[0.8, None], [0.6, 0.9]], [0.9, 0.8], [0.85, 0.75]
    results = {"order": 1, "method": "inclora", "seed": 42, "tasks": ["mnli", "cb"], "config": {},
               "accuracy_matrix": matrix, "single_task_accuracy": own, "single_task_accuracy_shared": shared,
               "oa": metrics.overall_accuracy(matrix), "bwt": metrics.backward_transfer(matrix),
               "fwt": metrics.forward_transfer(matrix, own), "fwt_last_row": metrics.forward_transfer_last_row(matrix,
                                                                                                               shared),
               "unlabelled_test": {"scoring": "dropped", "rows": {"mnli": 131, "cb": 0},
                                   "labelled_rows": {"mnli": 1500, "cb": 56}},
               "cost": {"trainings": 4, "optimizer_steps": 12, "wall_seconds": 5400.0, "device_hours": 3.0,
                        "device_unit": "CPU", "task_seconds": [1800.0, 1800.0],
                        "single_task": {"trainings": 2, "optimizer_steps": 6, "seconds": 1800.0}}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "run"), "--out", str(out)]) == 0
    summary = json.loads((out / "report.json").read_text())
    # by hand, MNLI's entries × f: OA (0.6f + 0.9)/2; BWT 0.6f − 0.8f; FWT ((0.8f − 0.9f) + (0.9 − 0.8))/2;
    # FWT last row ((0.6f − 0.85f) + (0.9 − 0.75))/2
    assert summary["oa"]["inclora"]["1"]["mean"] == pytest.approx(100 * (0.6 * f + 0.9) / 2)
    transfer = summary["transfer"]["inclora"]["1"]  # order 1 alone: its own column, no SC
    assert transfer["bwt"]["mean"] == pytest.approx(100 * (0.6 - 0.8) * f)
    assert transfer["fwt"]["mean"] == pytest.approx(100 * (-0.1 * f + 0.1) / 2)
    assert transfer["fwt_last_row"]["mean"] == pytest.approx(100 * (-0.25 * f + 0.15) / 2)
    # the learning accuracy, from the matrix of a results.json written before it was recorded: (0.8f + 0.9)/2 in the
    # tables, (0.8 + 0.9)/2 = 85 as recorded in the Runs list
    assert transfer["la"]["mean"] == pytest.approx(100 * (0.8 * f + 0.9) / 2)
    text = (out / "report.md").read_text()
    assert f"| inclora | {100 * (0.6 * f + 0.9) / 2:.2f} (n=1) |" in text  # no config: synthetic, no paper figure
    assert "- mnli: 131 of its 1631 test rows are labelled outside the options; the tables score them as wrong" in text
    assert "rescaled by 1500/1631" in text
    # the Runs list: as recorded (OA 75), with its scoring and cost; the cost table sums the method's runs
    assert "| inclora | 1 | 42 | 75.00 | 85.00 | -20.00 | 0.00 | -5.00 | dropped | 4 | 12 | 1.500 | 3.000 CPU |" \
        in text
    assert "| method | BWT O1 | FWT O1 | FWT last row O1 | LA O1 |" in text
    assert "| method | runs | trainings | optimizer steps | wall h | device-hours |" in text
    assert "| inclora | 1 | 4 | 12 | 1.500 | 3.000 CPU |" in text


def test_a_run_cut_by_max_tasks_is_labelled_partial_apart_from_the_full_runs(tmp_path):
    """A --max-tasks 1 run of order 1 (4 tasks) gets rows of its own, no paper number and its own radar; the full
    run keeps its label, beside the paper."""
    runs = tmp_path / "runs"
    write_run(runs / "full", "inclora", 1, 42, *RUNS["inclora", 1, 42], REAL)  # tasks t1, t2, as the paper's order
    partial = {"order": 1, "method": "inclora", "seed": 42, "tasks": ["dbpedia"], "config": {**REAL, "max_tasks": 1},
               "accuracy_matrix": [[0.75]], "single_task_accuracy": None, "oa": 75.0, "bwt": 0.0, "fwt": None}
    (runs / "partial").mkdir()
    (runs / "partial" / "results.json").write_text(json.dumps(partial))
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["methods"] == ["inclora", "inclora [first 1 of 4 tasks]"]
    assert "| inclora | 60.00 (n=1) (paper 59.25) |" in text
    assert "| inclora [first 1 of 4 tasks] | 75.00 (n=1) |\n" in text  # no paper number beside it
    assert "Rows marked [first n of N tasks] are partial orders, runs cut by --max-tasks" in text
    assert sorted(p.name for p in out.glob("bwt_radar*.png")) == ["bwt_radar_order1.png",
                                                                 "bwt_radar_order1_first1.png"]


def write_flagged_run(directory, method, seed, cells):
    """A two-task run of order 1 whose test cells hold these flags (row i: tasks j ≤ i); accuracies from them."""
    matrix = [[sum(c) / len(c) for c in row] + [None] * (2 - len(row)) for row in cells]
    results = {"order": 1, "method": method, "seed": seed, "tasks": ["t1", "t2"], "config": {},
               "data_fingerprint": f"data-seed{seed}", "accuracy_matrix": matrix,
               "oa": metrics.overall_accuracy(matrix), "bwt": metrics.backward_transfer(matrix),
               "test_flags": [[flags.pack(c) for c in row] for row in cells]}
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results))


def test_cells_get_within_seed_intervals_and_methods_a_paired_comparison(tmp_path):
    """Plain LoRA half right everywhere, the other method right everywhere, two seeds each: every resample of the
    other's OA is 100 (its interval [100, 100]); OA +50 in both seeds: no spread between them, so the interval is the
    test examples' of the mean of the two seeds: each example's share of a seed's difference is 50 · (1 − half), 0 or
    50, variance 625 over 8 examples, two tasks: W_s = 2 · 625 / 8, and the mean's W = 2 W_s / 4; BWT is 0 in every
    resample of both (each run's two cells of task 1 are the same flags, resampled together): [0, 0], within noise;
    LA (the diagonal: task 1's cell of training 1, task 2's of training 2) +50 with the same shares as OA's, so the
    same interval. Three comparisons: each at 1 − 0.05 / 3 (Bonferroni), the normal's quantile at 1 − 0.05 / 6."""
    half, right = [True, False] * 4, [True] * 8
    runs = tmp_path / "runs"
    for seed in (1, 2):
        write_flagged_run(runs / f"lora{seed}", "inclora", seed, [[half], [half, half]])
        write_flagged_run(runs / f"jump{seed}", "jumplora+ella", seed, [[right], [right, right]])
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    summary = json.loads((out / "report.json").read_text())
    assert summary["oa"]["jumplora+ella"]["1"]["within"] == [100.0, 100.0]
    assert summary["transfer"]["inclora"]["1"]["bwt"]["within"] == [0.0, 0.0]  # order 1 alone: no SC
    low, high = summary["oa"]["inclora"]["1"]["within"]
    assert low < 50 < high
    oa, bwt, la = summary["comparisons"]
    assert (oa["method"], oa["reference"], oa["metric"], oa["seeds"], oa["runs"], oa["difference"]) == \
        ("jumplora+ella", "inclora", "oa", [1, 2], 2, 50.0)
    half_width = NormalDist().inv_cdf(1 - 0.05 / 6) * (2 * 2 * 625 / 8 / 4) ** 0.5
    interval = [pytest.approx(50 - half_width), pytest.approx(50 + half_width)]
    assert (oa["family"], oa["confidence"], oa["interval"]) == (3, pytest.approx(1 - 0.05 / 3), interval)
    assert (la["metric"], la["difference"], la["family"], la["interval"], la["verdict"]) == \
        ("la", 50.0, 3, interval, "a difference over 2 seeds")
    assert (oa["verdict"], oa["improvement"], oa["improvement_interval"]) == ("a difference over 2 seeds", 1.0,
                                                                              [1.0, 1.0])
    assert (bwt["difference"], bwt["interval"], bwt["improvement"], bwt["verdict"]) == \
        (0.0, [0.0, 0.0], 0.5, "within noise at this size over 2 seeds")
    text = (out / "report.md").read_text()
    # runs of no config: the synthetic benchmark and the tiny model, so no paper figure, and a line says why
    assert "| jumplora+ella | 100.00 ± 0.00 [100.0, 100.0] |" in text and "(paper" not in text
    assert "- no paper figure beside inclora, jumplora+ella: synthetic benchmark, not CL_Benchmark\n" in text
    assert ("## Compared with inclora on the same test examples (seeds paired): 3 comparisons, each interval at "
            "98.33 % (Bonferroni) so that all 3 hold together at 95 %") in text
    assert (f"| jumplora+ella | O1 | OA | 2 | +50.00 | [{50 - half_width:.2f}, {50 + half_width:.2f}] | "
            "1.00 [1.00, 1.00] | a difference over 2 seeds |") in text
    assert ("| jumplora+ella | O1 | BWT | 2 | +0.00 | [0.00, 0.00] | 0.50 [0.50, 0.50] | within noise at this size "
            "over 2 seeds |") in text
    assert (f"| jumplora+ella | O1 | learning accuracy | 2 | +50.00 | [{50 - half_width:.2f}, {50 + half_width:.2f}] "
            "| 1.00 [1.00, 1.00] | a difference over 2 seeds |") in text
    assert NO_FLAGS not in text and summary["trade_offs"] == [] and "Less forgetting" not in text


def test_one_seed_a_side_says_so_and_a_benchmark_averages_its_orders(tmp_path):
    """One seed, orders 1 to 3 of the same two tasks (one data fingerprint, so the same test examples: their draws
    shared): per order a one-run comparison, and the SC column over the three orders of the seed, never a bare "a
    difference"; no probability of improvement with one run a side. OA +50 in each order, the shares of the three
    orders on the same examples: W = 2 · 625 / 8 as for one order (not a third of it); OA, BWT and LA in four
    columns: twelve comparisons at 1 − 0.05 / 12 (99.58 %)."""
    half, right = [True, False] * 4, [True] * 8
    runs = tmp_path / "runs"
    for order in (1, 2, 3):
        for method, cell in (("inclora", half), ("jumplora+ella", right)):
            write_flagged_run(runs / f"{method}{order}", method, 1, [[cell], [cell, cell]])
            path = runs / f"{method}{order}" / "results.json"
            path.write_text(path.read_text().replace('"order": 1', f'"order": {order}'))
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    found = json.loads((out / "report.json").read_text())["comparisons"]
    assert [(c["column"], c["metric"], c["runs"]) for c in found] == [
        (column, metric, runs) for column, runs in (("1", 1), ("2", 1), ("3", 1), ("sc", 3))
        for metric in ("oa", "bwt", "la")]
    sc = found[9]
    assert (sc["difference"], sc["se"], sc["family"]) == (50.0, pytest.approx((2 * 625 / 8) ** 0.5), 12)
    assert sc["verdict"] == "a difference on these test examples, for these 3 training runs of one seed"
    assert found[0]["verdict"] == "a difference on these test examples, for this one training run"
    assert all(c["improvement"] is None for c in found)
    assert sc["sentence"].startswith("jumplora+ella (SC (orders 1,2,3))'s OA is +50.00 points against inclora's "
                                     "(99.58 % interval [")
    text = (out / "report.md").read_text()
    assert "| jumplora+ella | SC (orders 1,2,3) | OA | 1 | +50.00 | [" in text
    assert "12 comparisons, each interval" in text
    assert "| – | a difference on these test examples, for this one training run |" in text


def write_configured_run(directory, method, order, matrix_values, lambdas, finished=None, **config):
    """A two-task run of `method`, seed 42, with these settings recorded (`lambdas` as it resolved them) and its
    results.json's time `finished` (seconds since the epoch) when given."""
    d0, l0, l1 = matrix_values
    matrix = [[d0, None], [l0, l1]]
    results = {"order": order, "method": method, "seed": 42, "tasks": ["t1", "t2"],
               "config": {"order": order, "method": method, "seed": 42, "device": "auto", "lambdas": lambdas,
                          "lr": 0.001, **config},
               "lambdas": lambdas, "accuracy_matrix": matrix, "oa": metrics.overall_accuracy(matrix),
               "bwt": metrics.backward_transfer(matrix)}
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results))
    if finished is not None:
        os.utime(directory / "results.json", (finished, finished))
    return directory / "results.json"


def test_runs_that_differ_in_a_setting_or_in_lambda_are_rows_of_their_own(tmp_path, capsys):
    """Same method, order and seed, but another learning rate, or other λ at the same order: rows of their own,
    labelled by what differs, none dropped; λ that differ between orders (as the paper's tables do) stay one row."""
    runs = tmp_path / "runs"
    write_configured_run(runs / "lr1", "inclora", 1, (0.9, 0.6, 0.68), [0.0, 0.0])  # OA 64
    write_configured_run(runs / "lr2", "inclora", 1, (0.7, 0.4, 0.6), [0.0, 0.0], lr=0.002)  # OA 50
    write_configured_run(runs / "lam4", "jumplora+ella", 1, (0.8, 0.5, 0.7), [0.0, 1e4])  # OA 60
    write_configured_run(runs / "lam5", "jumplora+ella", 1, (0.8, 0.78, 0.8), [0.0, 1e5])  # OA 79
    write_configured_run(runs / "ewc1", "ewc", 1, (0.8, 0.7, 0.7), [0.0, 5000.0])  # OA 70
    write_configured_run(runs / "ewc2", "ewc", 2, (0.8, 0.5, 0.9), [0.0, 7000.0])  # OA 70
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err
    summary = json.loads((out / "report.json").read_text())
    assert summary["methods"] == ["inclora (lr 0.001)", "inclora (lr 0.002)", "jumplora+ella (λ 0,10000)",
                                  "jumplora+ella (λ 0,100000)", "ewc"]
    assert {method: {order: cell["mean"] for order, cell in summary["oa"][method].items() if cell["n"]}
            for method in summary["methods"]} == {
        "inclora (lr 0.001)": {"1": pytest.approx(64.0)}, "inclora (lr 0.002)": {"1": pytest.approx(50.0)},
        "jumplora+ella (λ 0,10000)": {"1": pytest.approx(60.0)},
        "jumplora+ella (λ 0,100000)": {"1": pytest.approx(79.0)},
        "ewc": {"1": pytest.approx(70.0), "2": pytest.approx(70.0)}}  # no SC: orders 1 and 2 of its 1, 2, 3
    assert "| inclora (lr 0.002) | 50.00 (n=1) |" in (out / "report.md").read_text()


def test_a_named_choice_away_from_its_default_and_a_setting_that_differs_share_the_labels_brackets(tmp_path):
    """The registry's label (the threshold away from "global") and the setting that tells two rows apart, together."""
    runs = tmp_path / "runs"
    write_configured_run(runs / "a", "jumplora+ella", 1, (0.8, 0.5, 0.7), [0.0, 1e4], threshold="per_block")
    write_configured_run(runs / "b", "jumplora+ella", 1, (0.8, 0.5, 0.7), [0.0, 1e4], threshold="per_block", lr=0.002)
    write_configured_run(runs / "c", "inclora", 1, (0.8, 0.5, 0.7), [0.0, 0.0], threshold="per_block")
    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    assert json.loads((tmp_path / "report" / "report.json").read_text())["methods"] == [
        "inclora", "jumplora+ella (per_block, lr 0.001)", "jumplora+ella (per_block, lr 0.002)"]


def store_run(client, experiment_id, name, results_path, start, end):
    """A finished continual run in MLflow (`jumplora.kind` run) holding `results_path`, started and ended at these
    times (seconds since the epoch)."""
    from jumplora import tracking

    run = client.create_run(experiment_id, start_time=start * 1000, tags={tracking.KIND_TAG: "run"}, run_name=name)
    client.log_artifact(run.info.run_id, str(results_path))
    client.set_terminated(run.info.run_id, "FINISHED", end_time=end * 1000)


def test_a_run_read_twice_keeps_the_one_that_finished_later_from_either_source(tmp_path, capsys, monkeypatch):
    """One configuration and seed run twice (another result each time): the report keeps the run that finished last,
    by its results.json's time in a folder and by MLflow's end time in an experiment, and one warning says which.
    (MLflow's file store: the same search as SQLite's, without the seconds of a new database's migrations.)"""
    from mlflow import MlflowClient

    t0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC
    runs = tmp_path / "runs"
    later = write_configured_run(runs / "a", "inclora", 1, (0.9, 0.6, 0.68), [0.0, 0.0], finished=t0 + 600)  # OA 64
    earlier = write_configured_run(runs / "b", "inclora", 1, (0.7, 0.4, 0.6), [0.0, 0.0], finished=t0)  # OA 50
    assert main(["report", str(runs), "--out", str(tmp_path / "from-folder")]) == 0
    assert capsys.readouterr().err == (
        f"warning: {runs / 'b'} and {runs / 'a'} hold the same run (inclora, order 1, seed 42, every setting equal); "
        f"the one that finished later is used: {runs / 'a'} (finished 2023-11-14 22:23:20 UTC; the other "
        "2023-11-14 22:13:20 UTC)\n")
    kept = json.loads((tmp_path / "from-folder" / "report.json").read_text())["runs"]
    assert [(run["source"], run["oa"]) for run in kept] == [(str(runs / "a"), pytest.approx(64.0))]

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(uri)
    experiment = client.create_experiment("jumplora-order1")
    store_run(client, experiment, "first", earlier, t0 - 3600, t0)  # started first, finished first
    store_run(client, experiment, "second", later, t0 - 60, t0 + 600)
    assert main(["report", "jumplora-order1", "--tracking-uri", uri, "--out", str(tmp_path / "from-mlflow")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]  # not MLflow's
    assert warnings == [
        "warning: jumplora-order1/first and jumplora-order1/second hold the same run (inclora, order 1, seed 42, "
        "every setting equal); the one that finished later is used: jumplora-order1/second (finished 2023-11-14 "
        "22:23:20 UTC; the other 2023-11-14 22:13:20 UTC)"]
    kept = json.loads((tmp_path / "from-mlflow" / "report.json").read_text())["runs"]
    assert [(run["source"], run["oa"]) for run in kept] == [("jumplora-order1/second", pytest.approx(64.0))]


def test_a_method_left_out_of_the_comparisons_is_said(tmp_path, capsys):
    """Before: runs whose orders and seeds could not be paired gave no comparison section, and no word why."""
    runs = tmp_path / "runs"
    write_configured_run(runs / "a", "inclora", 1, (0.9, 0.6, 0.68), [0.0, 0.0])
    write_configured_run(runs / "b", "jumplora+ella", 2, (0.8, 0.5, 0.7), [0.0, 1e4])
    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    why = ("jumplora+ella is not compared with inclora: no run of it has the order and seed of a run of inclora (its: "
           "order 2 seed 42): run both with the same --order and --seed")
    out = capsys.readouterr().out
    assert f"## Methods not compared, and why\n\n- {why}\n" in out
    assert out == (tmp_path / "report" / "report.md").read_text() + f"report: {tmp_path / 'report' / 'report.md'}, " \
        f"{tmp_path / 'report' / 'report.html'}\n"
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"<h2>Methods not compared, and why</h2><ul>\n<li>{why}</li>" in page
    assert json.loads((tmp_path / "report" / "report.json").read_text())["comparisons"] == []


def test_a_synthetic_capped_run_stands_beside_no_paper_figure_and_the_report_says_why(tmp_path):
    """Before: `inclora 69.50 … (paper 59.25)` beside a synthetic tiny-T5 run. Runs that cannot be compared with the
    paper (here the synthetic benchmark, the tiny model and caps on their examples) stand beside no paper figure, and
    one line per reason says so; a method of real runs keeps its figures."""
    runs = tmp_path / "runs"
    capped = {"model": "tiny", "max_train_per_task": 64, "max_eval_per_task": 32}  # no data_dir: synthetic
    write_run(runs / "inclora-s42", "inclora", 1, 42, *RUNS["inclora", 1, 42], capped)  # OA 60, BWT −30
    write_run(runs / "inclora-s43", "inclora", 1, 43, *RUNS["inclora", 1, 43], capped)  # OA 64, BWT −30
    write_run(runs / "jump-s42", "jumplora+ella", 1, 42, *RUNS["jumplora+ella", 1, 42], REAL)  # OA 79, BWT −2
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| inclora | 62.00 ± 2.83 |\n" in text and "| inclora | -30.00 ± 0.00 |" in text
    assert "| jumplora+ella | 79.00 (n=1) (paper 78.84) |\n" in text
    why = ["no paper figure beside inclora: synthetic benchmark, not CL_Benchmark",
           "no paper figure beside inclora: capped at --max-train-per-task 64, --max-eval-per-task 32",
           "no paper figure beside inclora: tiny model (tiny), not t5-large"]
    assert "## No paper figures, and why\n\n" + "".join(f"- {line}\n" for line in why) in text
    assert json.loads((out / "report.json").read_text())["paper_notes"] == why
    page = (out / "report.html").read_text()
    assert "<h2>No paper figures, and why</h2><ul>\n" + "\n".join(f"<li>{line}</li>" for line in why) in page


HALF, RIGHT = [True, False] * 4, [True] * 8  # a test cell's flags: half right, all right


def two_run_report(tmp_path: Path, lora_rows: list, jump_rows: list) -> tuple[Path, dict]:
    """`jumplora report` over two runs of order 1 from their test flags (plain LoRA's, then jumplora+ella's): its
    folder and its report.json."""
    runs, out = tmp_path / "runs", tmp_path / "report"
    write_flagged_run(runs / "lora", "inclora", 1, lora_rows)
    write_flagged_run(runs / "jump", "jumplora+ella", 1, jump_rows)
    assert main(["report", str(runs), "--out", str(out)]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_a_lone_order_gives_no_benchmark_column(tmp_path):
    """Before: one order of SC was headed "SC (orders 1)", its column repeating order 1's. SC stands only over its
    whole order set (1, 2, 3): order 1 alone gets its own BWT / FWT / LA column and no SC, in the tables and in the
    comparisons."""
    out, summary = two_run_report(tmp_path, [[HALF], [HALF, HALF]], [[RIGHT], [RIGHT, RIGHT]])
    assert (summary["benchmarks"], summary["transfer_columns"]) == ({}, ["1"])
    assert [(c["column"], c["metric"]) for c in summary["comparisons"]] == [("1", "oa"), ("1", "bwt"), ("1", "la")]
    text = (out / "report.md").read_text()
    assert "| method | O1 |\n" in text and "| method | BWT O1 | FWT O1 | FWT last row O1 | LA O1 |\n" in text
    page = (out / "report.html").read_text()
    assert "SC" not in text and "<th>SC" not in page and "SC (orders" not in page


def test_less_forgetting_with_less_learning_is_said_to_be_a_trade_off(tmp_path):
    """Plain LoRA learns both tasks (diagonal 100, 100) and forgets task 1 to half; the other forgets nothing but
    learned task 2 to half. BWT +50: per example 100 · (right − half) of task 1, 0 or 100, SE √(2500 / 8) ≈ 17.7;
    LA −25: per example 50 · (half − right) of task 2, SE √(625 / 8) ≈ 8.8; OA 0 (75 against 75). Three comparisons,
    each at 98.33 % (z ≈ 2.39): BWT's and LA's intervals leave 0 out, so the report says it is a trade-off, naming
    task 2, under the comparison table (md, html) and in report.json."""
    out, summary = two_run_report(tmp_path, [[RIGHT], [HALF, RIGHT]], [[RIGHT], [RIGHT, HALF]])
    z = NormalDist().inv_cdf(1 - 0.05 / 6)
    bwt, la = (next(c for c in summary["comparisons"] if c["metric"] == metric) for metric in ("bwt", "la"))
    assert (bwt["difference"], la["difference"]) == (50.0, -25.0)
    assert la["interval"] == [pytest.approx(-25 - z * (625 / 8) ** 0.5), pytest.approx(-25 + z * (625 / 8) ** 0.5)]
    said = ("jumplora+ella (O1) forgets less than inclora (BWT +50.00 points), but learned task 2 (t2) less (its "
            "accuracy right after learning it 50.0 against 100.0 %; learning accuracy -25.00 points, a difference on "
            "these test examples, for this one training run): a trade-off, not a gain.")
    assert summary["trade_offs"] == [{"method": "jumplora+ella", "reference": "inclora", "column": "1", "order": 1,
                                      "orders": [1], "seeds": [1], "sentence": said}]
    text = (out / "report.md").read_text()
    assert ("| jumplora+ella | O1 | learning accuracy | 1 | -25.00 | [" in text
            and f" |\n\n### Less forgetting, less learning\n\n- {said}\n\n## Cost" in text)
    assert f"</table>\n<h3>Less forgetting, less learning</h3><ul>\n<li>{said}</li>\n</ul>" in \
        (out / "report.html").read_text()


def test_fwt_last_row_has_its_interval_in_both_tables(tmp_path):
    """Task 1 half right after task 2 (2 of 4), everything else right, the shared plain-LoRA a0 right everywhere: FWT
    last row = ((50 − 100) + (100 − 100)) / 2 = −25; resampled, task 1's k ~ Binomial(4, 1/2) right, (25 k − 100) / 2
    with P(k = 0) = P(k = 4) = 1/16 > 2.5 %: [−50, 0], in the per-method table and in the runs as recorded."""
    from jumplora import uncertainty
    from jumplora.report.render import markdown
    from jumplora.report.runs import collect
    from jumplora.report.summary import aggregate
    from jumplora.results import RunResults

    right, half = [True] * 4, [True, True, False, False]
    cells, a0 = [[right], [half, right]], [flags.pack(right)] * 2
    results = {"order": 1, "method": "inclora", "seed": 1, "tasks": ["t1", "t2"], "config": {},
               "data_fingerprint": "d", "accuracy_matrix": [[1.0, None], [0.5, 1.0]], "oa": 75.0, "bwt": -50.0,
               "fwt": 0.0, "fwt_last_row": -25.0, "single_task_accuracy": [1.0, 1.0],
               "single_task_accuracy_shared": [1.0, 1.0], "single_task_flags": a0, "single_task_flags_shared": a0,
               "test_flags": [[flags.pack(c) for c in row] for row in cells]}
    results["intervals"] = uncertainty.run_intervals(RunResults.from_json(results)).to_json()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    summary = aggregate(collect([str(tmp_path / "run")]))
    assert summary["transfer"]["inclora"]["1"]["fwt_last_row"]["within"] == [-50.0, 0.0]
    text = markdown(summary)
    assert "| inclora | -50.00 (n=1) [-100.0, 0.0] | 0.00 (n=1) [0.0, 0.0] | -25.00 (n=1) [-50.0, 0.0] |" in text
    assert " | 0.00 [0.0, 0.0] | -25.00 [-50.0, 0.0] | – |" in text  # the run's FWT, FWT last row, unlabelled rows
