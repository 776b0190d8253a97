"""reproduce.py: the tables from run results (no Ray), and a small sweep on a local Ray of 2 CPUs."""

from __future__ import annotations

import json

import pytest

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
    assert (tmp_path / "tables.md").read_text() == text
    oa_csv = (tmp_path / "oa.csv").read_text().splitlines()
    assert oa_csv[0] == "method,column,mean,std,seeds,paper" and "ella,sc,59.3750,13.2583,2,78.23" in oa_csv


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
