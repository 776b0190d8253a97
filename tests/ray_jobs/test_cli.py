"""Bad input: one `error: …` line and exit code 2 before anything runs; `--dry-run` prints the plan (no Ray)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jumplora import options, spaces
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.results import StageRecord, TrialRecord
from jumplora.storage import MANIFEST, Storage
from ray_jobs import cli, cluster, grid, grid_lambda, jobs, reproduce, sequence, train_sequence, trials
from ray_jobs.cli import run_main

REPO = Path(__file__).resolve().parents[2]


def refused(main, args: list[str], capsys) -> str:
    assert run_main(main, args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize(("main", "args", "message"), [
    (grid_lambda.SCRIPT, ["--order", "9", "--preset", "smoke"], "unknown order 9"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "huge"], "unknown preset 'huge'"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,0,100"],
     "value 2 of '1,0,100': expected a number > 0"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,nan,100"],
     "value 2 of '1,nan,100': expected a finite"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,inf"],
     "value 2 of '1,inf': expected a finite number"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,a"],
     "value 2 of '1,a': expected a number, got 'a'"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--lambdas", "0,nan,1,1"],
     "'0,nan,1,1': expected a finite number"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--model-dropout", "nan"],
     "argument --model-dropout: expected a finite number, got nan"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--method", "inclora"],
     "needs a method with a per-task λ (ella, jumplora+ella, ewc)"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--lambdas", "0,-1,1,1"],
     "'0,-1,1,1': expected a number ≥ 0"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--lambdas", "0,1"], "has 2 values"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--num-workers", "3"], "split evenly"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--max-tasks", "5"], "has 4 tasks"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--max-train-per-task", "40"], "3 steps"),
    (reproduce.SCRIPT, ["--benchmark", "xl", "--preset", "smoke"], "unknown benchmark"),
    (reproduce.SCRIPT, ["--methods", "lwf", "--preset", "smoke"], "unknown method"),
    (reproduce.SCRIPT, ["--orders", "4", "--preset", "smoke"], "benchmark sc has orders"),
    (grid_lambda.SCRIPT, ["--order", "1", "--workers-per-trial", "0"], "expected a number ≥ 1"),
    (grid_lambda.SCRIPT, ["--order", "1", "--gpus-per-worker", "-1"], "expected auto or a number ≥ 0, got -1"),
    (reproduce.SCRIPT, ["--gpus-per-worker", "some"], "expected auto or a number, got 'some'"),
    # round 2: a name that leaves the storage path, repeated values that would run twice, ignored values
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--name", ".."],
     "argument --name: expected a folder name (no '/', not '.' or '..'), got '..'"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--name", "../elsewhere"], "expected a folder name"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,1,1e3"],
     "argument --grid: '1,1,1e3' lists 1 twice"),
    (grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--grid", "1,,1e3"],
     "argument --grid: '1,,1e3' has an empty value"),
    (reproduce.SCRIPT, ["--preset", "smoke", "--seeds", "42,42"],
     "argument --seeds: '42,42' lists 42 twice: give each value once"),
    (reproduce.SCRIPT, ["--preset", "smoke", "--methods", "inclora,inclora"], "'inclora,inclora' lists inclora twice"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--model-dropout", "1.5"],
     "argument --model-dropout: expected a number in [0, 1), got 1.5"),
    (train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--lambdas", "0,,1,1"],
     "argument --lambdas: '0,,1,1' has an empty value at position 2 of 4"),
])
def test_bad_input_is_one_line_and_exit_2(main, args, message, capsys):
    assert message in refused(main, args, capsys)


def test_run_config_is_the_preset_then_the_options_given():
    args = train_sequence.build_parser().parse_args(["--preset", "smoke", "--max-tasks", "2", "--seed", "7"])
    config = cli.run_config(args, "sequence")
    assert (config.order, config.model, config.max_train_per_task, config.max_tasks, config.seed, config.method,
            config.lambdas) == (1, "tiny", 96, 2, 7, "jumplora+ella", "paper")
    assert jobs.with_lambdas(config).lambdas == [0.0, 3e4, 3e4, 3e4]  # search_spaces/lambdas.yaml default[1]
    args = train_sequence.build_parser().parse_args(["--preset", "smoke", "--order", "4", "--lambdas", "paper-grid",
                                               "--ella-delta", "interpolated"])
    assert jobs.with_lambdas(cli.run_config(args, "sequence")).lambdas == [  # grid.jumplora+ella.global.interpolated
        0, 1e4, 1e5, 1e5, 10, 1e5, 1e5, 1e5, 1e3, 1e4, 1e5, 1e4, 1e4, 1e5, 1e4]
    args = grid_lambda.build_parser().parse_args(["--order", "2", "--preset", "smoke", "--model-dropout", "0"])
    assert (cli.run_config(args, "grid", order=args.order).order, args.model_dropout, args.seed) == (2, 0.0, None)


# the Ray scripts' own options that share a field's name: the grid's --order is required, reproduce.py's --lambdas
# takes a table for every order of the sweep
@pytest.mark.parametrize(("command", "parser", "own"), [
    ("grid", lambda: grid_lambda.build_parser().parse_args(["--order", "1"]), {"order"}),
    ("sequence", lambda: train_sequence.build_parser().parse_args([]), set()),
    ("reproduce", lambda: reproduce.build_parser().parse_args([]), {"lambdas"})])
def test_a_ray_script_shows_exactly_the_fields_that_name_it(command, parser, own):
    fields = set(options.fields())  # RunConfig's and the methods' own settings
    assert set(vars(parser())) & fields == set(options.command_fields(command)) | own


def test_an_unwritable_storage_path_is_refused(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    error = refused(train_sequence.SCRIPT, ["--order", "1", "--preset", "smoke", "--storage-path",
                                           str(blocker / "runs")], capsys)
    assert f"{blocker / 'runs'} is inside the file {blocker}: pass a folder to write" in error


@pytest.mark.timeout(120)
def test_the_entry_script_prints_one_line_without_traceback():
    done = subprocess.run([sys.executable, "ray_jobs/train_sequence.py", "--order", "9", "--preset", "smoke"],
                          cwd=REPO, capture_output=True, text=True, timeout=110)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].startswith("error: unknown order 9") and "Traceback" not in done.stderr


def test_grid_dry_run_prints_the_plan(capsys, tmp_path, tiny_cache):
    assert run_main(grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--dry-run", "--gpus-per-worker", "0",
                                "--cache-dir", str(tiny_cache), "--storage-path", str(tmp_path)]) == 0
    plan = capsys.readouterr().out
    assert "stage 4: task 4 agnews: λ ∈ {1, 10, 100, 1000, 10000, 100000}" in plan
    assert "22 trainings" in plan and not any(tmp_path.iterdir())
    # 22 trainings of 96 examples; dev: 16 in stage 1, then 6 trials × 16 × t in stage t; test: task 1 and the three
    # a0 runs in stage 1 (4 × 16), then the chosen trial's tasks 1..t (16 × t)
    assert "| total |  | 22 | 2,112 | 880 | 208 |" in plan
    assert "| 3 | yahoo | 6 | 576 | 288 | 48 |" in plan


def test_a_dry_run_on_an_empty_cache_counts_the_presets_tokens_without_building_it(capsys, tmp_path, tiny_cache):
    """The plan counts source tokens with the preset's tokenizer, trained alone when the preset is not cached: no
    model is built and nothing is written in the cache, and the counts are those of the built preset's tokenizer."""
    empty = tmp_path / "empty"
    plans = []
    for cache in (empty, tiny_cache):
        assert run_main(grid_lambda.SCRIPT, ["--order", "4", "--preset", "smoke", "--dry-run", "--gpus-per-worker",
                                             "0", "--cache-dir", str(cache),
                                             "--storage-path", str(tmp_path / "grids")]) == 0
        plans.append(capsys.readouterr().out)
    assert not empty.exists() or not any(empty.iterdir())
    assert plans[0] == plans[1]
    total = next(line for line in plans[0].splitlines() if line.startswith("| total |"))
    assert "n/a" not in total  # the token columns counted


# 9 methods × 3 orders × 3 seeds; a0 per kind (plain LoRA, shared by every method; JumpLoRA with each of the two
# threshold groupings methods.yaml uses; full fine-tuning), seed and task; MTL's one training on the union counts as
# its tasks' trainings: sc 81 × 4 + 4 × 3 × 4, ls 81 × 15 + 4 × 3 × 15
@pytest.mark.parametrize(("benchmark", "runs", "baselines", "trainings"), [("sc", 81, 48, 372),
                                                                           ("ls", 81, 180, 1395)])
def test_reproduce_dry_run_counts_the_trainings(benchmark, runs, baselines, trainings, capsys, tmp_path):
    assert run_main(reproduce.SCRIPT, ["--benchmark", benchmark, "--preset", "smoke", "--dry-run", "--gpus-per-worker",
                                 "0", "--storage-path", str(tmp_path)]) == 0
    plan = capsys.readouterr().out
    assert f"{runs} continual runs + {baselines} single-task runs = {trainings} task trainings" in plan
    assert "jumplora+ella-order1-seed43: threshold global, ella_delta sparse, λ [0 30000 30000 30000]" in plan or \
        benchmark == "ls"


def test_reproduce_takes_a_registered_method_that_methods_yaml_does_not_list(capsys, tmp_path, monkeypatch):
    """A plugin's method (here one registered in-process: LoRA with no regulariser of its own, no per-task λ) beside
    a built-in: 2 methods × 3 orders × 1 seed = 6 runs of 4 tasks, and one a0 per task (plain LoRA: the plugin's own
    kind, which is the shared one too): 6 × 4 + 4 = 28 trainings."""
    from jumplora.adapters import LORA
    from jumplora.methods import METHODS, MethodSpec

    monkeypatch.setitem(METHODS.specs, "lora-again", MethodSpec("lora-again", adapter=LORA))
    assert run_main(reproduce.SCRIPT, ["--benchmark", "sc", "--methods", "inclora,lora-again", "--seeds", "42",
                                       "--preset", "smoke", "--dry-run", "--gpus-per-worker", "0",
                                       "--storage-path", str(tmp_path)]) == 0
    plan = capsys.readouterr().out
    assert "6 continual runs + 4 single-task runs = 28 task trainings" in plan
    assert "lora-again-order1-seed42" in plan


def test_reproduce_gives_a_setting_to_the_methods_that_read_it(capsys, tmp_path):
    """A method's own setting given to a sweep goes to the runs of the methods that read it (EWC's Fisher sample
    here), not to the others; given to a sweep none of whose methods reads it, it is one line."""
    argv = ["--benchmark", "sc", "--orders", "1", "--seeds", "42", "--preset", "smoke", "--dry-run",
            "--gpus-per-worker", "0", "--storage-path", str(tmp_path), "--ewc-fisher-samples", "8"]
    assert run_main(reproduce.SCRIPT, [*argv, "--methods", "inclora,ewc"]) == 0
    plan = capsys.readouterr().out
    assert "  ewc-order1-seed42: ewc_fisher_samples 8, λ [0 5000 5000 5000]" in plan
    assert "  inclora-order1-seed42: λ [0 0 0 0]" in plan
    assert run_main(reproduce.SCRIPT, [*argv, "--methods", "inclora,ella"]) == 2
    assert capsys.readouterr().err == ("error: --ewc-fisher-samples is a setting of ewc, which none of the sweep's "
                                       "methods (inclora, ella) reads: leave it out, or add a method that reads it\n")


def test_a_driver_interrupted_with_unfinished_trials_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    """On SIGINT Tune ends `fit` early without an error; the trials left without a record were interrupted (not a
    `FileNotFoundError` on their record): one line, exit 130, and the same command resumes."""

    class StoppedEarly:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def fit(self):
            return SimpleNamespace(errors=[])

    monkeypatch.setattr(trials.tune, "Tuner", StoppedEarly)
    monkeypatch.setattr(trials, "trainable", lambda *args: None)
    job = jobs.Job(RunConfig(), str(tmp_path / "cache"))
    unfinished = [jobs.Trial("task01-lam0", job, jobs.Sequence(1))]
    request = cluster.WorkerRequest(workers=1, cpus=1.0, gpus=0.0)

    def interrupted(argv) -> int:
        trials.run_trials("task01", unfinished, request, 1, Storage(str(tmp_path)))
        return 0

    assert run_main(interrupted, []) == 130
    assert capsys.readouterr().err == ("interrupted: run the same command again to resume (finished tasks, trials "
                                       "and stages are kept)\n")


def test_ray_trains_sigint_exit_inside_fit_is_an_interrupt(monkeypatch):
    """Ray Train's own SIGINT handler aborts the run and calls `sys.exit` from within `fit`."""
    for name in ("connect", "warn_if_storage_not_shared"):
        monkeypatch.setattr(sequence.cluster, name, lambda *args: None)
    monkeypatch.setattr(sequence.jobs, "build_base", lambda job: None)
    monkeypatch.setattr(sequence.jobs, "claim", lambda folder, job: None)
    monkeypatch.setattr(sequence.worker, "trainer", lambda *args: SimpleNamespace(fit=lambda: sys.exit(0)))
    args = train_sequence.build_parser().parse_args(["--order", "1", "--preset", "smoke"])
    folder = SimpleNamespace(exists=lambda name: False, uri="memory://run")
    with pytest.raises(KeyboardInterrupt):
        sequence.run_sequence(args, jobs.Job(RunConfig(), "cache"), 1, None, SimpleNamespace(uri="memory://"), folder,
                              "run")


def test_a_training_that_diverged_in_a_worker_is_one_line_and_exit_2(capsys):
    """A DivergedError raised in a Ray Train worker reaches the driver wrapped (a RayTaskError in a WorkerGroupError,
    or a Tune trial's error chained to the driver's RuntimeError): the driver prints its line alone."""
    from ray.exceptions import RayTaskError
    from ray.train import WorkerGroupError

    from jumplora.errors import DivergedError

    line = "training diverged in task 1 (dbpedia): the loss is not finite from step 2 of 3 on (CE = nan)"
    in_worker = RayTaskError("train_fn_per_worker", "Traceback ...", DivergedError(line)).as_instanceof_cause()
    for failed in (WorkerGroupError("worker 1 failed", {1: in_worker}), in_worker):
        def main(argv, failed=failed) -> int:
            raise RuntimeError("1 trial(s) failed") from failed

        assert run_main(main, []) == 2
        assert capsys.readouterr().err == f"error: {line}\n"


def test_a_halving_dry_run_refuses_what_the_run_refuses_and_says_which_rungs_merge(capsys, tmp_path, tiny_cache,
                                                                                   monkeypatch):
    base = ["--order", "1", "--preset", "smoke", "--search", "halving", "--dry-run", "--gpus-per-worker", "0",
            "--cache-dir", str(tiny_cache), "--storage-path", str(tmp_path)]
    error = refused(grid_lambda.SCRIPT, [*base, "--max-concurrent", "2"], capsys)
    assert "--search halving trains a stage's 6 λ at once" in error and "only 2 trial(s)" in error
    eight = {"CPU": 8.0, "GPU": 0.0}  # a cluster that holds the 6 λ at once
    monkeypatch.setattr(cluster, "resources", lambda: (eight, [eight]))
    assert run_main(grid_lambda.SCRIPT, [*base, "--rungs", "0.2,0.3"]) == 0
    plan = capsys.readouterr().out
    # the smoke preset's 96 examples at batch 32: 3 steps a task, both rungs at step 1
    assert "stage 2: rungs 0.2 and 0.3 fall on step 1 of 3: compared there once" in plan
    assert not any(tmp_path.iterdir())


def test_a_grid_dry_run_does_not_read_halving_yaml(capsys, tmp_path, tiny_cache, monkeypatch):
    monkeypatch.setattr(spaces, "halving", lambda: (_ for _ in ()).throw(JumpLoRAError("halving.yaml: eta must be")))
    assert run_main(grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--dry-run", "--gpus-per-worker", "0",
                                "--cache-dir", str(tiny_cache), "--storage-path", str(tmp_path)]) == 0
    assert "(--search halving not compared: halving.yaml: eta must be)" in capsys.readouterr().out


def test_a_resubmitted_grid_names_the_stages_it_skips(tmp_path, capsys, monkeypatch):
    """Two of three stages in the manifest: one line names them, and only the third stage runs."""
    job = jobs.Job(RunConfig(order=1, max_tasks=3, lambdas=[0.0] * 3), str(tmp_path / "cache"))
    stages = grid.plan(("dbpedia", "amazon", "yahoo"), [1.0, 10.0])
    folder = Storage(str(tmp_path / "grid"))
    done = [StageRecord(task=s.index + 1, task_name=s.task, selected_lam=s.lambdas[0],
                        trials=[TrialRecord(lam=s.lambdas[0], dev_mean=0.5, selected=True)]) for s in stages[:2]]
    folder.write_json(MANIFEST, {"job": {**job.identity(), "lambdas_tried": [list(s.lambdas) for s in stages]},
                                      "stages": [record.to_json() for record in done]})
    ran = []
    monkeypatch.setattr(grid, "run_stage", lambda stage, *args: ran.append(stage.task) or dataclasses.replace(
        done[-1], task=stage.index + 1, task_name=stage.task))
    monkeypatch.setattr(grid, "finish", lambda *args: None)
    monkeypatch.setattr(grid, "report_text", lambda *args: "")
    grid.run_grid(folder, job, stages, request=cluster.WorkerRequest(), concurrent=1)
    assert ran == ["yahoo"]
    assert capsys.readouterr().out.splitlines()[0] == \
        f"{folder.uri}: stage(s) 1 (dbpedia), 2 (amazon) finished before, skipped"


@pytest.mark.parametrize(("env", "address_file", "expected"), [
    ({"RAY_ADDRESS": "10.0.0.1:6379"}, False, None),  # a submitted job: its cluster
    ({}, True, None),  # a cluster `ray start`ed on this machine
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, False, 2),
    ({"CUDA_VISIBLE_DEVICES": ""}, False, 0),
])
def test_the_local_ray_is_known_before_it_starts(env, address_file, expected, monkeypatch, tmp_path):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    for name in ("RAY_ADDRESS", "RAY_TMPDIR", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if address_file:
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379")
    cpus = len(os.sched_getaffinity(0))  # the CPUs this process may run on
    assert cluster.local_start() == (None if expected is None else {"CPU": cpus, "GPU": expected})


def test_a_search_the_machine_cannot_run_is_refused_before_ray_starts(capsys, tmp_path, tiny_cache, monkeypatch):
    """A halving search of 6 λ on a local Ray of 2 CPUs: refused from what the local Ray would hold, none started."""
    import ray

    monkeypatch.setattr(cluster, "local_start", lambda: {"CPU": 2, "GPU": 0})
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: pytest.fail("Ray started"))
    error = refused(grid_lambda.SCRIPT, ["--order", "1", "--preset", "smoke", "--search", "halving", "--cache-dir",
                                         str(tiny_cache), "--storage-path", str(tmp_path / "grids")], capsys)
    assert "--search halving trains a stage's 6 λ at once" in error and "only 2 trial(s)" in error
    assert not (tmp_path / "grids").exists()
