"""The figures: files and sizes, and the numbers they draw against an independent computation (numpy sets)."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from PIL import Image

from jumplora import analysis, plots
from jumplora.results import RunResults, StageRecord

BLOCKS = ["encoder.block.0", "encoder.block.1", "encoder.block.2", "decoder.block.0", "decoder.block.1"]
MODULES = [f"{b}.layer.0.SelfAttention.{m}" for b in BLOCKS for m in ("q", "v")]
TASKS = ["dbpedia", "amazon", "yahoo"]


def sparse_updates(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    updates = {}
    for i, name in enumerate(MODULES):
        dense = torch.randn(6, 5, generator=generator)
        keep = torch.rand(6, 5, generator=generator) < 0.1 + 0.08 * i  # sparsity differs by module
        updates[name] = dense * keep
    return updates


def run_updates() -> list[dict[str, torch.Tensor]]:
    """Each task's update of `run_results`."""
    return [sparse_updates(seed) for seed in range(len(TASKS))]


def run_results() -> RunResults:
    """A run's results with what the figures draw (its updates: `run_updates`)."""
    per_task = run_updates()
    matrix = [[0.9, None, None], [0.6, 0.8, None], [0.5, 0.7, 0.75]]
    return RunResults(order=1, method="jumplora+ella", seed=42, tasks=TASKS, accuracy_matrix=matrix,
                      dev_accuracy_matrix=matrix, oa=66.7, bwt=-25.0,
                      sparsity=[analysis.sparsity(u) for u in per_task],
                      jaccard={"matrix": analysis.jaccard_matrix(per_task),
                               "middle_block": analysis.middle_block(MODULES),
                               "mean_with_earlier_middle_block": analysis.overlap_with_earlier(per_task)})


def mtl_updates() -> list[dict[str, torch.Tensor]]:
    return [sparse_updates(7)]


def mtl_results() -> RunResults:
    """An MTL run's results: one training on all tasks, so one row of accuracies, one sparsity record, one update
    (`mtl_updates`), and no BWT or FWT (null)."""
    update = mtl_updates()[0]
    row = [0.5, 0.7, 0.75]
    return RunResults(order=1, method="mtl", seed=42, tasks=TASKS, accuracy_matrix=[row], dev_accuracy_matrix=[row],
                      oa=100 * sum(row) / 3, bwt=None, fwt=None, fwt_last_row=None,
                      sparsity=[analysis.sparsity(update)],
                      jaccard={"matrix": analysis.jaccard_matrix([update]),
                               "middle_block": analysis.middle_block(MODULES),
                               "mean_with_earlier_middle_block": analysis.overlap_with_earlier([update])})


@pytest.fixture
def results():
    return run_results()


def check_png(path, min_width=300, min_height=200):
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width >= min_width and image.height >= min_height
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 20  # not blank


def numpy_jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    sa, sb = set(np.flatnonzero(a.numpy())), set(np.flatnonzero(b.numpy()))
    return 1.0 if not sa | sb else len(sa & sb) / len(sa | sb)


def test_accuracy_heatmap(results, tmp_path):
    values = plots.accuracy_heatmap(results, tmp_path / "h.png")
    check_png(tmp_path / "h.png")
    assert values[2].tolist() == pytest.approx([50.0, 70.0, 75.0])
    assert math.isnan(values[0, 1]) and math.isnan(values[1, 2]) and values[1, 0] == pytest.approx(60.0)


def test_sparsity_by_layer_is_encoder_then_decoder(results, tmp_path):
    blocks, lines = plots.sparsity_by_layer(results, tmp_path / "s.png")
    check_png(tmp_path / "s.png")
    assert blocks == BLOCKS
    for task, updates in zip(TASKS, run_updates(), strict=True):
        expected = []
        for block in BLOCKS:
            arrays = [updates[m].numpy() for m in MODULES if m.startswith(block + ".")]
            expected.append(100.0 * sum(int((a == 0).sum()) for a in arrays) / sum(a.size for a in arrays))
        assert lines[task] == pytest.approx(expected)


def test_overlap_matrix_and_middle_layer_curve(results, tmp_path):
    matrix, curve = plots.overlap(results, tmp_path / "o.png")
    check_png(tmp_path / "o.png")
    per_task = run_updates()
    expected = [[np.mean([numpy_jaccard(a[m], b[m]) for m in MODULES]) for b in per_task] for a in per_task]
    np.testing.assert_allclose(matrix, np.array(expected), rtol=0, atol=1e-12)
    middle = [m for m in MODULES if m.startswith("encoder.block.1.")]  # ⌊3/2⌋ = 1
    expected_curve = [None] + [np.mean([np.mean([numpy_jaccard(per_task[t][m], per_task[j][m]) for m in middle])
                                        for j in range(t)]) for t in (1, 2)]
    assert curve[0] is None and curve[1:] == pytest.approx(expected_curve[1:])


def test_bwt_radar_one_trace_per_run(results, tmp_path):
    other = dataclasses.replace(results, accuracy_matrix=[[0.8, None, None], [0.8, 0.7, None], [0.4, 0.9, 0.6]])
    profiles = plots.bwt_radar([("a", results), ("b", other)], tmp_path / "r.png")
    check_png(tmp_path / "r.png")
    assert profiles["a"] == pytest.approx([-40.0, -10.0, 0.0])
    assert profiles["b"] == pytest.approx([-40.0, 20.0, 0.0])


def test_grid_lambdas_plot(tmp_path):
    records = [StageRecord.from_json(record) for record in [
        {"task": 1, "task_name": "dbpedia", "selected_lam": 0.0,
         "trials": [{"lam": 0.0, "dev_mean": 0.9, "test_mean": 0.9, "selected": True}]},
        {"task": 2, "task_name": "amazon", "selected_lam": 1e3,
         "trials": [{"lam": lam, "dev_mean": dev, "test_mean": dev, "selected": lam == 1e3}
                    for lam, dev in [(1.0, 0.5), (1e3, 0.7), (1e5, 0.6)]]},
    ]]
    drawn = plots.grid_lambdas(records, tmp_path / "g.png")
    check_png(tmp_path / "g.png", min_width=600)
    assert drawn["chosen"] == {"dbpedia": 0.0, "amazon": 1e3}
    assert drawn["trials"]["amazon"] == [(1.0, 50.0), (1e3, 70.0), (1e5, 60.0)]


def test_a_stage_lambda_profile(tmp_path):
    """A halving stage: λ 1e3 and 1e5 trained to the end (full dev), 1 and 10 were cut at step 4 (rung subset)."""
    from jumplora import guidance

    def cut(lam, mean, past, current):
        return {"lam": lam, "dev_mean": None, "selected": False, "cut_at_step": 4, "rung_dev_mean": mean,
                "rung_dev_past": past, "rung_dev_current": current}

    record = StageRecord.from_json({"task": 3, "task_name": "yahoo", "selected_lam": 1e3, "trials": [
        cut(1.0, 0.60, 0.70, 0.40), cut(10.0, 0.695, 0.75, 0.585),
        {"lam": 1e3, "dev_mean": 0.70, "dev_past": 0.80, "dev_current": 0.50, "selected": True},
        {"lam": 1e5, "dev_mean": 0.69, "dev_past": 0.85, "dev_current": 0.37, "selected": False}]})
    drawn = guidance.lambda_plot(record, tmp_path / "l.png")
    check_png(tmp_path / "l.png")
    assert drawn["lambda"] == [1.0, 10.0, 1e3, 1e5]
    assert drawn["mean"] == pytest.approx([60.0, 69.5, 70.0, 69.0])
    assert drawn["past"] == pytest.approx([70.0, 75.0, 80.0, 85.0])
    assert drawn["current"] == pytest.approx([40.0, 58.5, 50.0, 37.0])
    assert guidance.last_dev(record.trials[0]) == (0.60, 0.70, 0.40, "step 4 (rung subset)")


def test_bwt_radar_leaves_out_runs_without_bwt(results, tmp_path):
    profiles = plots.bwt_radar([("mtl", mtl_results()), ("a", results)], tmp_path / "r.png")
    assert list(profiles) == ["a"] and profiles["a"] == pytest.approx([-40.0, -10.0, 0.0])
    check_png(tmp_path / "r.png")
    assert plots.bwt_radar([("mtl", mtl_results())], tmp_path / "none.png") == {}
    assert not (tmp_path / "none.png").exists()  # MTL alone: no radar at all


def test_an_mtl_run_has_one_row_and_no_radar(tmp_path):
    mtl = mtl_results()
    plots.run_plots(mtl, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([plots.HEATMAP, plots.SPARSITY, plots.OVERLAP])
    values = plots.accuracy_heatmap(mtl, tmp_path / "h.png")
    assert values.shape == (1, 3) and values[0].tolist() == pytest.approx([50.0, 70.0, 75.0])
    blocks, lines = plots.sparsity_by_layer(mtl, tmp_path / "s.png")
    assert list(lines) == ["mtl"] and blocks == BLOCKS
