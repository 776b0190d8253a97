"""reproduce.py: the tables from run results (no Ray), and a small sweep on a local Ray of 2 CPUs."""

from __future__ import annotations

import json

import pytest

from jumplora import spaces
from jumplora.config import RunConfig
from ray_jobs import jobs, sweep, worker
from ray_jobs.storage import Storage
from tests.ray.conftest import cli_args

TASKS = ["dbpedia", "amazon"]


def fake_run(folder: Storage, method: str, order: int, seed: int, diagonal: float, last: list[float]) -> jobs.Trial:
    run_id = f"{method}-order{order}-seed{seed}"
    results = {"tasks": TASKS, "accuracy_matrix": [[diagonal, None], last],
               "oa": 100 * sum(last) / 2, "bwt": 100 * (last[0] - diagonal)}
    folder.child(f"runs/{run_id}/{worker.RUN_DIR}").write_json("results.json", results)
    config = RunConfig(order=order, method=method, seed=seed, lambdas=[0.0, 1.0, 1.0, 1.0])
    return jobs.Trial(run_id, jobs.Job(config, str(folder.uri)), jobs.Sequence(len(TASKS)))


def test_tables_are_mean_and_sample_std_over_seeds_beside_the_paper(tmp_path):
    folder = Storage(str(tmp_path))
    runs = [fake_run(folder, "ella", 1, 42, 0.5, [0.25, 0.75]), fake_run(folder, "ella", 1, 43, 0.5, [0.5, 0.75]),
            fake_run(folder, "ella", 2, 42, 0.5, [0.5, 0.5]), fake_run(folder, "ella", 2, 43, 0.5, [0.75, 0.75])]
    a0 = {f"a0-ella-seed{seed}-{task}": 0.5 for seed in (42, 43) for task in TASKS}
    plan = sweep.Sweep("sc", ["ella"], [1, 2], [42, 43], runs, [], 8)
    text = sweep.write_tables(plan, folder, a0)
    # OA per seed: order 1 → 50.0, 62.5; order 2 → 50.0, 75.0; SC (mean over orders) → 50.0, 68.75
    assert "| ella | 56.25 ± 8.84 (paper 78.09) | 62.50 ± 17.68 (paper 78.37) | 59.38 ± 13.26 (paper 78.23) |" in text
    # BWT per seed (mean over orders): (−25 + 0)/2 = −12.5, (0 + 25)/2 = 12.5; FWT: diagonal 0.5 and 0.75 vs a0 0.5
    assert "| ella | 0.00 ± 17.68 (paper -0.50) |" in text
    # FWT last row (the authors' script): order 1 → 0, 12.5; order 2 → 0, 25 per seed; the paper's FWT beside it only
    assert "| ella | 0.00 ± 17.68 (paper -0.50) | 9.38 ± 4.42 | 9.38 ± 13.26 (paper -1.50) |" in text
    assert (tmp_path / "tables.md").read_text() == text
    oa_csv = (tmp_path / "oa.csv").read_text().splitlines()
    assert oa_csv[0] == "method,column,mean,std,seeds,paper" and "ella,sc,59.3750,13.2583,2,78.23" in oa_csv


def fake_mtl_run(folder: Storage, order: int, seed: int, row: list[float]) -> jobs.Trial:
    """MTL: one training on all tasks, one row of accuracies, no BWT (null) and no a0."""
    run_id = f"mtl-order{order}-seed{seed}"
    results = {"tasks": TASKS, "accuracy_matrix": [row], "oa": 100 * sum(row) / 2, "bwt": None}
    folder.child(f"runs/{run_id}/{worker.RUN_DIR}").write_json("results.json", results)
    config = RunConfig(order=order, method="mtl", seed=seed, lambdas=[0.0] * 4)
    return jobs.Trial(run_id, jobs.Job(config, str(folder.uri)), jobs.Sequence(len(TASKS)))


def test_tables_have_ewc_beside_the_paper_and_mtl_without_transfer(tmp_path):
    folder = Storage(str(tmp_path))
    runs = [fake_run(folder, "ewc", 1, 42, 0.5, [0.25, 0.75]), fake_run(folder, "ewc", 1, 43, 0.5, [0.5, 0.75]),
            fake_mtl_run(folder, 1, 42, [0.6, 0.8]), fake_mtl_run(folder, 1, 43, [0.7, 0.9])]
    a0 = {f"a0-ewc-seed{seed}-{task}": 0.5 for seed in (42, 43) for task in TASKS}  # none for MTL
    text = sweep.write_tables(sweep.Sweep("sc", ["ewc", "mtl"], [1], [42, 43], runs, [], 8), folder, a0)
    # EWC: OA 50, 62.5 beside the paper's (SPEC §6: O1 46.30, SC 47.90); BWT −25, 0; FWT 12.5, 12.5; last row 0, 12.5;
    # the paper has no EWC BWT / FWT, so no paper number there
    assert "| ewc | 56.25 ± 8.84 (paper 46.30) | 56.25 ± 8.84 (paper 47.90) |" in text
    assert "| ewc | -12.50 ± 17.68 | 12.50 ± 0.00 | 6.25 ± 8.84 |" in text
    # MTL: OA 70, 80; no BWT, FWT or FWT last row
    assert "| mtl | 75.00 ± 7.07 | 75.00 ± 7.07 |" in text and "| mtl | – | – | – |" in text
    assert "(paper –)" not in text and "nan" not in text
    transfer_csv = (tmp_path / "transfer.csv").read_text().splitlines()
    assert "mtl,bwt,sc,,,0,–" in transfer_csv and "ewc,bwt,sc,-12.5000,17.6777,2,–" in transfer_csv


def test_the_plan_runs_every_method_and_no_a0_for_mtl(tmp_path, capsys):
    """A dry run (no Ray: GPUs per worker given): by default every method of methods.yaml, each with its a0 runs but
    MTL's."""
    import ray

    args = cli_args(tmp_path / "cache", tmp_path, "--orders", "1", "--seeds", "42", "--max-tasks", "2", "--dry-run",
                    "--gpus-per-worker", "0")
    assert sweep.main(args) == 0
    text = capsys.readouterr().out
    methods = list(spaces.methods_file()["methods"])
    assert len(methods) == 9 and text.startswith(f"benchmark sc: methods {', '.join(methods)}; orders [1]; seeds [42]")
    assert "  mtl-order1-seed42: " in text and "  ewc-order1-seed42: " in text and "λ [0 5000 5000 5000]" in text
    # 9 continual runs of 2 tasks, and 2 a0 runs for each method but MTL
    assert "9 continual runs + 16 single-task runs = 34 task trainings" in text
    assert not ray.is_initialized()


@pytest.mark.timeout(600)
def test_a_small_sweep_runs_and_a_rerun_trains_nothing(local_ray, smoke_cache, tmp_path, capsys):
    args = cli_args(smoke_cache, tmp_path, "--methods", "jumplora+ella", "--orders", "1", "--seeds", "42,43",
                    "--max-tasks", "2", "--name", "small")
    assert sweep.main(args) == 0
    text = capsys.readouterr().out
    assert "| jumplora+ella |" in text and "(paper 78.84)" in text
    single_task = json.loads((tmp_path / "small" / sweep.SINGLE_TASK).read_text())
    assert sorted(single_task) == [f"a0-jumplora+ella-seed{s}-{t}" for s in (42, 43) for t in ("amazon", "dbpedia")]
    experiment = sorted(p.name for p in (tmp_path / "small" / "sweep").iterdir())
    assert sweep.main(args) == 0
    assert sorted(p.name for p in (tmp_path / "small" / "sweep").iterdir()) == experiment
