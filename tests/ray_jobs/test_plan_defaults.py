"""The Ray scripts as typed: `--gpus-per-worker auto` takes a GPU per worker when the cluster has GPUs, the paper
preset reads the real data, or stops before Ray starts with one line saying how to get it, and a plan names a
method's setting only where the method reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from jumplora.data import location
from ray_jobs import grid_lambda, reproduce, train_sequence
from ray_jobs.cli import run_main

REPO = Path(__file__).resolve().parents[2]
REAL_DATA = REPO.parent / "shared" / "data" / "CL_Benchmark"
NO_DATA = ("error: no CL_Benchmark data at ~/.cache/jumplora/CL_Benchmark: build it there with `jumplora data build`, "
           "or pass --data-dir DIR or set JUMPLORA_DATA_DIR (--data-dir synthetic: the synthetic benchmark)")


@pytest.fixture(scope="module")
def ray_with_gpus():
    """A local Ray that declares 2 GPUs (none need exist: a dry run schedules nothing)."""
    ray.init(address="local", num_cpus=1, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def empty_home(monkeypatch, tmp_path) -> Path:
    """A home without data, the default location as shipped (tests/conftest.py moves it out of the way)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(location, "DEFAULT_DATA_DIR", "~/.cache/jumplora/CL_Benchmark")
    return tmp_path


@pytest.mark.timeout(120)
def test_the_paper_preset_without_data_stops_before_ray_with_one_line(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "JUMPLORA_DATA_DIR"}
    done = subprocess.run([sys.executable, "ray_jobs/grid_lambda.py", "--order", "4", "--dry-run"], cwd=REPO,
                          env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=110)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == NO_DATA and "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("main", "args"), [(train_sequence.SCRIPT, ["--order", "1"]),
                                            (reproduce.SCRIPT, ["--dry-run"]),
                                            (grid_lambda.SCRIPT, ["--order", "1", "--model", "google-t5/t5-small"])])
def test_every_script_needs_the_data_for_a_real_model(main, args, empty_home, capsys):
    assert run_main(main, args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == NO_DATA + "\n"
    assert not ray.is_initialized() and not any(empty_home.iterdir())


def test_jumplora_data_dir_holds_the_data_of_a_real_model(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JUMPLORA_DATA_DIR", str(tmp_path / "elsewhere"))
    assert run_main(grid_lambda.SCRIPT, ["--order", "1", "--dry-run", "--gpus-per-worker", "0"]) == 2
    assert f"data directory {tmp_path / 'elsewhere'} does not exist" in capsys.readouterr().err


def test_the_paper_preset_runs_on_the_synthetic_benchmark_only_when_asked(capsys, tmp_path):
    assert run_main(grid_lambda.SCRIPT, ["--order", "1", "--dry-run", "--gpus-per-worker", "0", "--data-dir",
                                         "synthetic", "--storage-path", str(tmp_path)]) == 0
    assert "preset paper (model google-t5/t5-large)" in capsys.readouterr().out


@pytest.mark.timeout(600)
def test_the_plan_takes_one_gpu_per_worker_when_the_cluster_has_gpus(ray_with_gpus, capsys, tmp_path):
    if not (REAL_DATA / "tasks.json").is_file():
        pytest.skip(f"the shared CL_Benchmark data is not at {REAL_DATA}")
    assert run_main(grid_lambda.SCRIPT, ["--order", "4", "--dry-run", "--data-dir", str(REAL_DATA), "--storage-path",
                                str(tmp_path)]) == 0
    plan = capsys.readouterr().out
    assert "preset paper (model google-t5/t5-large)" in plan
    assert "per trial 1 worker(s) × (1 CPU, 1 GPU)" in plan and not any(tmp_path.iterdir())


def test_a_plan_names_the_threshold_only_for_the_methods_that_read_it(capsys, tmp_path):
    """The threshold's grouping is JumpLoRA's adapter's: ELLA, EWC and IncLoRA refuse --threshold, and their runs'
    plan lines (reproduce.py) and a grid's plan name none; each method's own settings stay."""
    assert run_main(reproduce.SCRIPT, ["--benchmark", "sc", "--orders", "1", "--seeds", "42", "--preset", "smoke",
                                 "--methods", "jumplora+ella,ella,ewc,inclora", "--dry-run", "--gpus-per-worker", "0",
                                 "--storage-path", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1:5] == [
        "  jumplora+ella-order1-seed42: threshold global, ella_delta sparse, λ [0 30000 30000 30000], model tiny, "
        "caps 96/16",
        "  ella-order1-seed42: ella_delta sparse, λ [0 30000 30000 30000], model tiny, caps 96/16",
        "  ewc-order1-seed42: ewc_fisher_samples 256, λ [0 5000 5000 5000], model tiny, caps 96/16",
        "  inclora-order1-seed42: λ [0 0 0 0], model tiny, caps 96/16"]
    assert run_main(grid_lambda.SCRIPT, ["--order", "1", "--method", "ella", "--preset", "smoke", "--max-tasks", "2",
                                "--dry-run", "--gpus-per-worker", "0", "--storage-path", str(tmp_path),
                                "--cache-dir", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == ("λ grid of order 1 (dbpedia, amazon): ella, ella_delta sparse, "
                                                       "seed 42, preset smoke (model tiny); data: the synthetic "
                                                       "benchmark")
    assert not any(tmp_path.iterdir())
