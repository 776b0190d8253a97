"""`jumplora report` on two methods × two seeds × orders 1 and 2 equals a hand computation of mean ± sample std."""

import json

import pytest

from jumplora import metrics
from jumplora.cli import main

# (method, order, seed): (a[0][0], a[1][0], a[1][1], a0) for a two-task order
RUNS = {
    ("inclora", 1, 42): (0.8, 0.5, 0.7, [0.9, 0.8]),  # OA 60, BWT −30, FWT −10
    ("inclora", 1, 43): (0.9, 0.6, 0.68, [0.9, 0.7]),  # OA 64, BWT −30, FWT −1
    ("inclora", 2, 42): (0.7, 0.4, 0.6, [0.8, 0.6]),  # OA 50, BWT −30, FWT −5
    ("inclora", 2, 43): (0.8, 0.5, 0.66, [0.8, 0.7]),  # OA 58, BWT −30, FWT −2
    ("jumplora+ella", 1, 42): (0.8, 0.78, 0.8, [0.8, 0.8]),  # OA 79, BWT −2, FWT 0
    ("jumplora+ella", 1, 43): (0.9, 0.85, 0.75, [0.9, 0.8]),  # OA 80, BWT −5, FWT −2.5
    ("jumplora+ella", 2, 42): (0.7, 0.7, 0.7, [0.7, 0.7]),  # OA 70, BWT 0, FWT 0
    ("jumplora+ella", 2, 43): (0.8, 0.76, 0.8, [0.7, 0.8]),  # OA 78, BWT −4, FWT 5
}


def write_run(directory, method, order, seed, diagonal0, last0, last1, a0):
    matrix = [[diagonal0, None], [last0, last1]]
    results = {"order": order, "method": method, "seed": seed, "tasks": ["t1", "t2"],
               "config": {"threshold": "global", "ella_delta": "sparse"}, "accuracy_matrix": matrix,
               "oa": metrics.overall_accuracy(matrix), "bwt": metrics.backward_transfer(matrix),
               "fwt": metrics.forward_transfer(matrix, a0)}
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results))


def test_report_tables_equal_a_hand_computation(tmp_path, capsys):
    for (method, order, seed), (d0, l0, l1, a0) in RUNS.items():
        write_run(tmp_path / "runs" / f"{method}-o{order}-s{seed}" / "run", method, order, seed, d0, l0, l1, a0)
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary = json.loads((out / "report.json").read_text())
    # hand computation: mean and sample std (ddof = 1) of two values x, y are (x+y)/2 and |x−y|/√2
    s2 = 2 ** 0.5
    expected_oa = {
        "inclora": {"1": (62.0, 4 / s2), "2": (54.0, 8 / s2), "sc": (58.0, 6 / s2)},  # SC per seed: 55, 61
        "jumplora+ella": {"1": (79.5, 1 / s2), "2": (74.0, 8 / s2), "sc": (76.75, 4.5 / s2)},  # 74.5, 79
    }
    expected_transfer = {
        "inclora": {"bwt": (-30.0, 0.0), "fwt": (-4.5, 6 / s2)},  # FWT per seed: −7.5, −1.5
        "jumplora+ella": {"bwt": (-2.75, 3.5 / s2), "fwt": (0.625, 1.25 / s2)},  # BWT −1, −4.5; FWT 0, 1.25
    }
    assert summary["methods"] == ["inclora", "jumplora+ella"] and summary["benchmarks"] == {"sc": [1, 2]}
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
    assert "| inclora | 62.00 ± 2.83 (paper 59.25) | 54.00 ± 5.66 (paper 58.69) | 58.00 ± 4.24 (paper 62.60) |" \
        in text
    assert "| jumplora+ella | -2.75 ± 2.47 (paper -1.90) |" in text
    page = (out / "report.html").read_text()
    assert page.count("<img ") == 3 and "62.00 ± 2.83 (paper 59.25)" in page  # OA bars + one radar per order
    assert (out / "oa_by_method.png").stat().st_size > 1000 and (out / "bwt_radar_order2.png").exists()


def write_good_runs(root):
    for seed in (42, 43):
        write_run(root / f"inclora-s{seed}", "inclora", 1, seed, 0.8, 0.5, 0.7, [0.9, 0.8])


DAMAGED = {
    "truncated": ('{"order": 1, "method": "incl', "is not readable JSON"),
    "missing method": (json.dumps({"order": 1, "seed": 42, "oa": 60.0, "bwt": -30.0}), "lacks 'method'"),
    "not an object": ("[1, 2]", "does not hold a JSON object"),
    "wrong type": (json.dumps({"order": "one", "method": "inclora", "seed": 42, "oa": 60.0, "bwt": -30.0}),
                   "holds a value of the wrong type"),
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
