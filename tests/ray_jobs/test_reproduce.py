"""reproduce.py: the tables from run results (no Ray), and a small sweep on a local Ray of 2 CPUs."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import ray

from jumplora import spaces
from jumplora.config import RunConfig
from jumplora.continual import SHARED_ADAPTER, single_task_config
from jumplora.storage import RUN_DIR, Storage
from ray_jobs import jobs, reproduce, sweep
from tests.ray_jobs.conftest import cli_args

TASKS = ["dbpedia", "amazon"]


def fake_run(folder: Storage, method: str, order: int, seed: int, diagonal: float, last: list[float],
             seconds: float = 1800.0) -> jobs.Trial:
    run_id = f"{method}-order{order}-seed{seed}"
    results = {"order": order, "method": method, "seed": seed, "tasks": TASKS,
               "accuracy_matrix": [[diagonal, None], last], "oa": 100 * sum(last) / 2,
               "bwt": 100 * (last[0] - diagonal),
               "cost": {"trainings": 2, "optimizer_steps": 6, "wall_seconds": seconds, "device_hours": seconds / 1800,
                        "device_unit": "CPU"}}
    folder.child(f"runs/{run_id}/{RUN_DIR}").write_json("results.json", results)
    config = RunConfig(order=order, method=method, seed=seed, lambdas=[0.0, 1.0, 1.0, 1.0])
    return jobs.Trial(run_id, jobs.Job(config, str(folder.uri)), jobs.Sequence(len(TASKS)))


def a0_runs(method: str, values: dict[str, float], adapter: str | None = None) -> dict:
    """single_task.json entries of the a0 runs of `method` (its own adapter kind, or `adapter`), seeds 42 and 43: each
    took 360 s, 3 steps, on 2 CPU threads."""
    return {sweep.a0_id(single_task_config(RunConfig(order=1, method=method, seed=seed), adapter), task):
            {"a0": value, "seconds": 360.0, "steps": 3, "device_hours": 0.2, "device_unit": "CPU"}
            for seed in (42, 43) for task, value in values.items()}


def test_tables_are_mean_and_sample_std_over_seeds_beside_the_paper(tmp_path):
    folder = Storage(str(tmp_path))
    runs = [fake_run(folder, "ella", 1, 42, 0.5, [0.25, 0.75]), fake_run(folder, "ella", 1, 43, 0.5, [0.5, 0.75]),
            fake_run(folder, "ella", 2, 42, 0.5, [0.5, 0.5]), fake_run(folder, "ella", 2, 43, 0.5, [0.75, 0.75])]
    a0 = a0_runs("ella", {task: 0.5 for task in TASKS})  # plain LoRA: ELLA's own kind is the shared one
    assert a0 == a0_runs("ella", {task: 0.5 for task in TASKS}, SHARED_ADAPTER) and len(a0) == 4
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
    # cost beside accuracy: 4 runs of 2 trainings, 6 steps, 0.5 h, 1 CPU-hour each; no a0 run in the plan's baselines
    assert "| method | runs | trainings | optimizer steps | wall h | device-hours |" in text
    assert "| ella | 4 | 8 | 24 | 2.000 | 4.000 CPU |" in text and sweep.A0_ROW not in text
    assert "ella,4,8,24,2.000000,4.000000,CPU" in (tmp_path / "cost.csv").read_text().splitlines()


def test_tables_show_the_within_seed_interval_of_runs_that_kept_flags(tmp_path):
    """Every test cell and every a0 right on all 4 of its examples: each resample gives OA 100, BWT 0 and FWT 0, so
    the within-seed intervals are [100, 100] and [0, 0] beside the between-seed std."""
    folder = Storage(str(tmp_path))
    runs = [fake_run(folder, "ella", 1, seed, 1.0, [1.0, 1.0]) for seed in (42, 43)]
    for run in runs:
        results = folder.child(f"runs/{run.id}/{RUN_DIR}").read_json("results.json")
        folder.child(f"runs/{run.id}/{RUN_DIR}").write_json(
            "results.json", {**results, "data_fingerprint": run.id, "test_flags": [["4:Dw=="], ["4:Dw==", "4:Dw=="]]})
    a0 = {key: {**entry, "a0": 1.0, "a0_flags": "4:Dw=="}
          for key, entry in a0_runs("ella", {task: 1.0 for task in TASKS}).items()}
    text = sweep.write_tables(sweep.Sweep("sc", ["ella"], [1], [42, 43], runs, [], 8), folder, a0)
    assert "| ella | 100.00 ± 0.00 [100.0, 100.0] (paper 78.09) |" in text
    assert "| ella | 0.00 ± 0.00 [0.0, 0.0] (paper -0.50) | 0.00 ± 0.00 [0.0, 0.0] | 0.00 ± 0.00 [0.0, 0.0] " in text
    assert "(between-seed) [95 % bootstrap interval of that mean over the test examples (within-seed)]" in text


def fake_mtl_run(folder: Storage, order: int, seed: int, row: list[float]) -> jobs.Trial:
    """MTL: one training on all tasks, one row of accuracies, no BWT (null) and no a0."""
    run_id = f"mtl-order{order}-seed{seed}"
    results = {"order": order, "method": "mtl", "seed": seed, "tasks": TASKS, "accuracy_matrix": [row],
               "oa": 100 * sum(row) / 2, "bwt": None}
    folder.child(f"runs/{run_id}/{RUN_DIR}").write_json("results.json", results)
    config = RunConfig(order=order, method="mtl", seed=seed, lambdas=[0.0] * 4)
    return jobs.Trial(run_id, jobs.Job(config, str(folder.uri)), jobs.Sequence(len(TASKS)))


def test_tables_have_ewc_beside_the_paper_and_mtl_without_transfer(tmp_path):
    folder = Storage(str(tmp_path))
    runs = [fake_run(folder, "ewc", 1, 42, 0.5, [0.25, 0.75]), fake_run(folder, "ewc", 1, 43, 0.5, [0.5, 0.75]),
            fake_mtl_run(folder, 1, 42, [0.6, 0.8]), fake_mtl_run(folder, 1, 43, [0.7, 0.9])]
    # EWC's own a0 (full fine-tuning) for FWT; the shared plain-LoRA a0 for FWT last row; none for MTL
    a0 = {**a0_runs("ewc", {task: 0.5 for task in TASKS}),
          **a0_runs("ewc", {"dbpedia": 0.25, "amazon": 0.25}, SHARED_ADAPTER)}
    baselines = [jobs.Trial(run_id, runs[0].job, jobs.SingleTask(0)) for run_id in a0]
    text = sweep.write_tables(sweep.Sweep("sc", ["ewc", "mtl"], [1], [42, 43], runs, baselines, 8), folder, a0)
    # EWC: OA 50, 62.5 beside the paper's (SPEC §6: O1 46.30, SC 47.90); BWT −25, 0; FWT 12.5, 12.5 (own a0 0.5, 0.5);
    # last row against the shared a0 (0.25, 0.25): (0 + 0.5)/2 = 25, (0.25 + 0.5)/2 = 37.5; the paper has no EWC BWT /
    # FWT, so no paper number there
    assert "| ewc | 56.25 ± 8.84 (paper 46.30) | 56.25 ± 8.84 (paper 47.90) |" in text
    assert "| ewc | -12.50 ± 17.68 | 12.50 ± 0.00 | 31.25 ± 8.84 |" in text
    # cost: EWC's 2 runs; MTL's fake runs recorded none; the 8 a0 runs (360 s, 3 steps, 0.2 CPU-hours each)
    assert "| ewc | 2 | 4 | 12 | 1.000 | 2.000 CPU |" in text and "| mtl | 0 of 2 | – | – | – | – |" in text
    assert f"| {sweep.A0_ROW} | 8 | 8 | 24 | 0.800 | 1.600 CPU |" in text
    # MTL: OA 70, 80; no BWT, FWT or FWT last row
    assert "| mtl | 75.00 ± 7.07 | 75.00 ± 7.07 |" in text and "| mtl | – | – | – |" in text
    assert "(paper –)" not in text and "nan" not in text
    transfer_csv = (tmp_path / "transfer.csv").read_text().splitlines()
    assert "mtl,bwt,sc,,,0,–" in transfer_csv and "ewc,bwt,sc,-12.5000,17.6777,2,–" in transfer_csv


def test_the_plan_runs_every_method_and_no_a0_for_mtl(tmp_path, capsys):
    """A dry run (no Ray: GPUs per worker given): by default every method of methods.yaml, each with its a0 runs but
    MTL's."""

    args = cli_args(tmp_path / "cache", tmp_path, "--orders", "1", "--seeds", "42", "--max-tasks", "2", "--dry-run",
                    "--gpus-per-worker", "0")
    assert reproduce.SCRIPT(args) == 0
    text = capsys.readouterr().out
    methods = list(spaces.methods_file()["methods"])
    assert len(methods) == 9 and text.startswith(f"benchmark sc: methods {', '.join(methods)}; orders [1]; seeds [42]")
    assert "  mtl-order1-seed42: " in text and "  ewc-order1-seed42: " in text and "λ [0 5000 5000 5000]" in text
    # 9 continual runs of 2 tasks, and 2 a0 runs of each kind of a0 (plain LoRA: IncLoRA's, ELLA's, O-LoRA's and the
    # shared one of every method; JumpLoRA with the per-block threshold: JumpLoRA+IncLoRA's and +O-LoRA's; with the
    # global one: JumpLoRA+ELLA's; full fine-tuning: EWC's and SeqFT's); none for MTL
    assert "9 continual runs + 8 single-task runs = 26 task trainings" in text
    assert not ray.is_initialized()


@pytest.mark.timeout(600)
def test_a_small_sweep_shares_the_plain_lora_a0_and_a_rerun_trains_nothing(logging_ray, tiny_cache, tmp_path, capsys,
                                                                           calls):
    args = cli_args(tiny_cache, tmp_path, "--methods", "jumplora+ella,ella", "--orders", "1", "--seeds", "42,43",
                    "--max-tasks", "2", "--name", "small")
    calls.write_text("")
    assert reproduce.SCRIPT(args) == 0
    text = capsys.readouterr().out
    assert "| jumplora+ella |" in text and "(paper 78.84)" in text
    trained = Counter((entry["method"], entry["seed"], entry["train"]) for entry in map(json.loads,
                      calls.read_text().splitlines()) if "train" in entry)
    # counted in the workers: each method's continual run trained each task once per seed; the a0 runs trained each
    # task alone once per seed and kind: plain LoRA (ELLA's own a0 and the one every method shares: `inclora`'s
    # configuration) and JumpLoRA (JumpLoRA+ELLA's own: `jumplora+inclora`'s), not once per method
    runs = ("jumplora+ella", "ella", "inclora", "jumplora+inclora")
    assert trained == {(method, seed, task): 1 for method in runs for seed in (42, 43) for task in TASKS}
    single_task = json.loads((tmp_path / "small" / sweep.SINGLE_TASK).read_text())
    assert len(single_task) == 8 and sorted({run_id.split("-")[1] for run_id in single_task}) == ["inclora",
                                                                                                  "jumplora+inclora"]
    # FWT last row by hand: JumpLoRA+ELLA's last row against the shared plain-LoRA a0, per seed, then the mean
    per_seed = []
    for seed in (42, 43):
        run_dir = tmp_path / "small" / f"runs/jumplora+ella-order1-seed{seed}" / RUN_DIR
        results = json.loads((run_dir / "results.json").read_text())
        config = single_task_config(RunConfig.of(results["config"]), SHARED_ADAPTER)  # the run's, by the preset
        shared = [single_task[sweep.a0_id(config, task)]["a0"] for task in results["tasks"]]
        last = results["accuracy_matrix"][-1]
        per_seed.append(100 * sum(last[j] - shared[j] for j in range(2)) / 2)
    row = next(line.split(",") for line in (tmp_path / "small" / "transfer.csv").read_text().splitlines()
               if line.startswith("jumplora+ella,fwt_last_row,"))
    assert float(row[3]) == pytest.approx(sum(per_seed) / 2, abs=1e-4)
    assert f"| {sweep.A0_ROW} | 8 | 8 |" in text  # the cost table: the 8 a0 runs, one training each
    experiment = sorted(p.name for p in (tmp_path / "small" / "sweep").iterdir())
    assert reproduce.SCRIPT(args) == 0
    assert sorted(p.name for p in (tmp_path / "small" / "sweep").iterdir()) == experiment
