"""grid_lambda.py on a local Ray of 2 CPUs: selection re-checked from the checkpoints, test sets evaluated for the
chosen trials only (counted in the workers), resubmission, multi-worker trials, refusals, the plan; the halving
search: the steps it runs against its plan, its survivors against the grid's trials, a resubmitted stage."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import ray.train
from mlflow import MlflowClient

from jumplora import checkpoints
from jumplora.config import RunConfig
from jumplora.continual import evaluate, prepare
from jumplora.flags import unpack
from jumplora.lock import lock_path
from jumplora.metrics import backward_transfer, forward_transfer, overall_accuracy
from jumplora.storage import MANIFEST, RECORD, RUN_DIR, Storage
from jumplora.tracking import models
from ray_jobs import costs, grid, grid_lambda, grid_plan, grid_report, searches, trials
from ray_jobs.cli import run_main
from tests.ray_jobs.conftest import cli_args

pytestmark = pytest.mark.usefixtures("logging_ray")
GRID = [1.0, 1e3, 1e5]
REPO = Path(__file__).resolve().parents[2]


def logged(calls: Path, argv: list[str]) -> list[dict]:
    """What the workers evaluated and trained while `grid_lambda.SCRIPT(argv)` ran."""
    calls.write_text("")
    assert grid_lambda.SCRIPT(argv) == 0
    return [json.loads(line) for line in calls.read_text().splitlines()]


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return tmp_path_factory.mktemp("ray-grid")


def grid_args(cache, storage, name: str, tasks: int, lambdas: str, *extra: str) -> list[str]:
    return cli_args(cache, storage, "--order", "1", "--max-tasks", str(tasks), "--grid", lambdas, "--name", name,
                    *extra)


@pytest.fixture(scope="module")
def small_grid(tiny_cache, storage, calls):
    """3 tasks × 3 λ packed by the default `auto` (on a CPU a stage's λ spread over the trials that run at once: two
    trials at a time, so a stack of λ 1 and 1e3 and λ 1e5 alone), one process per trial; its workers' calls in
    `small.calls.json`."""
    entries = logged(calls, grid_args(tiny_cache, storage, "small", 3, "1,1e3,1e5"))
    (storage / "small.calls.json").write_text(json.dumps(entries))
    return storage / "small"


@pytest.fixture(scope="module")
def every_trial_grid(tiny_cache, storage, calls):
    """The first 2 tasks of `small_grid`'s grid with `--test-all-trials`, which trains one λ per trial (each stage of
    a grid is decided before the next task is read, so its stages are the first of a longer grid's); its workers'
    calls in `every-trial-tested.calls.json`."""
    entries = logged(calls, grid_args(tiny_cache, storage, "every-trial-tested", 2, "1,1e3,1e5", "--test-all-trials"))
    (storage / "every-trial-tested.calls.json").write_text(json.dumps(entries))
    return storage / "every-trial-tested"


# the halving search of `small_grid`'s grid: 3 optimizer steps a task, so rung fraction 0.3 is step round(0.9) = 1;
# η 3 keeps ⌈3/3⌉ = 1 trial; 8 of the 16 dev examples of each seen task at the rung; 3 trials at once (0.5 CPU each)
HALVING = ["--search", "halving", "--rungs", "0.3", "--eta", "3", "--rung-examples", "8", "--cpus-per-worker", "0.5"]


@pytest.fixture(scope="module")
def small_halving(tiny_cache, storage, calls):
    """The first 2 tasks of `small_grid`'s grid searched by halving; its workers' calls in `halving.calls.json`."""
    entries = logged(calls, grid_args(tiny_cache, storage, "halving", 2, "1,1e3,1e5", *HALVING))
    (storage / "halving.calls.json").write_text(json.dumps(entries))
    return storage / "halving"


def dev_mean_of(checkpoint_path: str, ws, base_state) -> float:
    """The mean dev accuracy over the seen tasks of a checkpoint, evaluated here in one process."""
    ws.model.load_state_dict(base_state)
    with ray.train.Checkpoint(checkpoint_path).as_directory() as directory:
        state = checkpoints.load(Path(directory), ws)
    seen = len(state.records)
    return math.fsum(evaluate(ws, ws.tasks[:seen], "dev", progress=False).accuracies) / seen


@pytest.mark.timeout(600)
def test_each_stage_selects_the_best_dev_accuracy(small_grid, tiny_cache):
    manifest = json.loads((small_grid / MANIFEST).read_text())
    stages = manifest["stages"]
    assert [s["task"] for s in stages] == [1, 2, 3]
    assert [[t["lam"] for t in s["trials"]] for s in stages[1:]] == [GRID, GRID]
    results = json.loads((small_grid / RUN_DIR / "results.json").read_text())
    ws = prepare(RunConfig.of({**results["config"], "device": "cpu"}), tiny_cache, progress=False)
    ws = dataclasses.replace(ws, tasks=ws.tasks[:3])
    base_state = copy.deepcopy(ws.model.state_dict())
    for stage in stages[1:]:
        ours = {}
        for trial in stage["trials"]:
            lambdas = [s["selected_lam"] for s in stages[: stage["task"] - 1]] + [trial["lam"]]
            ws = dataclasses.replace(ws, lambdas=lambdas)
            ours[trial["lam"]] = dev_mean_of(trial["checkpoint"], ws, base_state)
            assert ours[trial["lam"]] == pytest.approx(trial["dev_mean"], abs=1e-12)
            cells = [unpack(cell) for cell in trial["dev_flags"]]  # the flags the selection's SE reads, per seen task
            assert len(cells) == stage["task"] and math.fsum(c.mean() for c in cells) / len(cells) == \
                pytest.approx(trial["dev_mean"], abs=1e-12)
        best = max(ours.values())
        expected = min(lam for lam, value in ours.items() if value >= best - 1e-12)
        assert stage["selected_lam"] == expected
    assert results["lambdas"] == [s["selected_lam"] for s in stages]
    assert results["fwt"] is not None and len(results["single_task_accuracy"]) == 3
    # a0's flags: task 1's is the run's own first cell (the same training), tasks 2 and 3 the stage-1 a0 trials'; FWT
    # gets its interval from them
    a0_flags = [results["test_flags"][0][0]] + [b["a0_flags"] for b in stages[0]["baselines"]]
    assert results["single_task_flags"] == a0_flags
    assert [unpack(cell).mean() for cell in a0_flags] == pytest.approx(results["single_task_accuracy"], abs=1e-12)
    low, high = results["intervals"]["fwt"]
    assert low <= results["fwt"] <= high
    # JumpLoRA's a0 is not the shared plain-LoRA one that FWT last row reads: the grid has none
    assert results["single_task_accuracy_shared"] is None and results["fwt_last_row"] is None
    rows = (small_grid / "grid_trials.csv").read_text().splitlines()
    assert len(rows) == 1 + 1 + 2 * len(GRID) and rows[0].startswith("task,task_name,lambda")
    report = (small_grid / "grid_report.md").read_text()
    assert "every trial:" in report and "λ chosen per task by --select best" in report
    # the search's cost: task 1 and the a0 runs of tasks 2 and 3, then 3 λ trials in stages 2 and 3, 3 steps each
    assert "the whole search: 9 trainings, 27 optimizer steps, " in report


def evaluated(entries: list[dict], split: str) -> list[list[str]]:
    return sorted(entry["tasks"] for entry in entries if entry.get("split") == split)


@pytest.mark.timeout(900)
def test_only_the_chosen_trials_are_tested_and_the_results_equal_testing_every_trial(small_grid, every_trial_grid,
                                                                                    storage):
    """`small_grid`'s workers' evaluations against those of its first 2 tasks with `--test-all-trials`."""
    lean = json.loads((storage / "small.calls.json").read_text())
    results = json.loads((small_grid / RUN_DIR / "results.json").read_text())
    t1, t2, t3 = results["tasks"]
    stage_dev = [[t1]] + [[t1, t2]] * 3 + [[t1, t2, t3]] * 3  # stage 1: one trial; stages 2, 3: one per λ
    assert evaluated(lean, "dev") == sorted(stage_dev)
    # the a0 runs of tasks 2 and 3, then the chosen trial of each stage, once, on tasks 1..t
    assert evaluated(lean, "test") == sorted([[t2], [t3], [t1], [t1, t2], [t1, t2, t3]])
    full = json.loads((storage / "every-trial-tested.calls.json").read_text())
    assert evaluated(full, "dev") == sorted([[t1]] + [[t1, t2]] * 3)
    assert evaluated(full, "test") == sorted([[t1], [t2]] + [[t1, t2]] * 3)

    every = json.loads((every_trial_grid / RUN_DIR / "results.json").read_text())
    assert_first_tasks_equal(every, results, 2)
    lean_stages = json.loads((small_grid / MANIFEST).read_text())["stages"]
    full_stages = json.loads((every_trial_grid / MANIFEST).read_text())["stages"]
    assert len(full_stages) == 2
    for ours, theirs in zip(lean_stages[:2], full_stages, strict=True):
        assert [(t["lam"], t["dev_mean"], t["selected"]) for t in ours["trials"]] == \
            [(t["lam"], t["dev_mean"], t["selected"]) for t in theirs["trials"]]
        assert [t["test_mean"] for t in ours["trials"] if t["selected"]] == \
            [t["test_mean"] for t in theirs["trials"] if t["selected"]]
        assert all(t["test_mean"] is None for t in ours["trials"] if not t["selected"])
        assert all(t["test_mean"] is not None for t in theirs["trials"])


def assert_first_tasks_equal(short: dict, long: dict, tasks: int) -> None:
    """The results of a grid of the first `tasks` tasks of `long`'s order are `long`'s on those tasks: the λ chosen,
    the test and dev accuracies of those rows and columns, the single-task accuracies."""
    assert short["tasks"] == long["tasks"][:tasks]
    assert short["lambdas"] == long["lambdas"][:tasks]
    assert short["single_task_accuracy"] == long["single_task_accuracy"][:tasks]
    for key in ("accuracy_matrix", "dev_accuracy_matrix"):
        assert short[key] == [row[:tasks] for row in long[key][:tasks]], key


@pytest.mark.timeout(900)
def test_a_driver_killed_inside_a_stage_resumes_without_retraining_finished_trials(every_trial_grid, tiny_cache,
                                                                                 storage, calls, capsys):
    """The grid of `every_trial_grid` (one λ per trial), two λ to a trial (stage 2: a stack of λ 1 and 1e3, and λ
    1e5 alone), from a driver in another process, joined to the module's Ray; a second driver on the same name
    meanwhile is refused; the first driver is killed once a trial of stage 2 has finished, then the grid is
    resubmitted here (whose workers log their trainings), taking over the dead driver's lock. Only the λ without a
    record train again, and the numbers are those of one λ per trial. Its final model is registered
    (`--register-model`) once, and a grid resubmitted once more registers nothing new."""
    argv = grid_args(tiny_cache, storage, "resumed", 2, "1,1e3,1e5", "--lambdas-per-trial", "2", "--register-model",
                     "grid-resumed")
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    finished = storage / "resumed" / "task02" / trials.FINISHED
    with (storage / "resumed-driver.log").open("w") as log:
        driver = subprocess.Popen([sys.executable, str(REPO / "ray_jobs" / "grid_lambda.py"), *argv], env=env,
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while not lock_path(storage / "resumed").exists():
                assert driver.poll() is None and time.monotonic() < deadline, "the driver took no lock"
                time.sleep(0.2)
            assert run_main(grid_lambda.SCRIPT, argv) == 2  # a second driver on the same name, refused before Ray
            refused = capsys.readouterr().err
            assert refused.count("\n") == 1 and refused.startswith(
                f"error: {storage / 'resumed'} is being written by `grid_lambda.py` (pid {driver.pid} on ")
            while not (finished.exists() and any(finished.glob("*.json"))):
                assert driver.poll() is None and time.monotonic() < deadline, "no stage-2 trial finished"
                time.sleep(0.2)
        finally:
            driver.kill()
            driver.wait()
    done_before = {path.stem: path.read_bytes() for path in finished.glob("*.json")}
    assert len(done_before) < 3 and not (storage / "resumed" / "run").exists()
    time.sleep(5)  # Ray stops the dead driver's trials
    users = {}  # the user's notes beside the trials' folders and in them, the unfinished ones' included
    for folder in [storage / "resumed" / "task02", *(storage / "resumed" / "task02").iterdir()]:
        if folder.is_dir():
            (folder / "notes-of-mine.txt").write_text(f"mine, in {folder.name}\n")
            users[folder / "notes-of-mine.txt"] = f"mine, in {folder.name}\n"

    trained = [(entry["train"], entry["lam"]) for entry in logged(calls, argv) if "train" in entry]
    assert f"warning: taking over the lock of {storage / 'resumed'} from `grid_lambda.py` (pid {driver.pid} on " \
        in capsys.readouterr().err
    assert {path: path.read_text() for path in users} == users and len(users) >= 3
    results = json.loads((storage / "resumed" / RUN_DIR / "results.json").read_text())
    task2 = results["tasks"][1]
    retrained = {f"task02-lam{lam:g}" for task, lam in trained if task == task2}
    assert retrained == {f"task02-lam{lam:g}" for lam in GRID} - set(done_before)
    assert {name: (finished / f"{name}.json").read_bytes() for name in done_before} == done_before
    uninterrupted = json.loads((every_trial_grid / RUN_DIR / "results.json").read_text())
    for key in ("lambdas", "accuracy_matrix", "dev_accuracy_matrix", "single_task_accuracy", "oa", "bwt", "fwt"):
        assert results[key] == uninterrupted[key], key

    assert grid_lambda.SCRIPT(argv) == 0  # resubmitted once more: finished, nothing is registered again
    client = MlflowClient()  # the session's throwaway store (tests/conftest.py)
    [version] = client.search_model_versions("name = 'grid-resumed'")
    assert version.tags["jumplora.lambdas"] == json.dumps(results["lambdas"]) and version.tags["jumplora.order"] == "1"
    linked = client.get_logged_model(models.version_model_id(version)).metrics
    assert {m.key: m.value for m in linked}["OA"] == round(results["oa"], 2)  # as the MLflow view shows it
    assert (storage / "resumed" / RUN_DIR / "merged_model" / "config.json").is_file()


def stage_segments(entries: list[dict], tasks: list[str]) -> list[list[dict]]:
    """The workers' calls split by stage: stage t ends with its chosen trial's test row, on tasks 1..t."""
    segments, current = [], []
    for entry in entries:
        current.append(entry)
        if entry.get("split") == "test" and entry["tasks"] == tasks[: len(segments) + 1]:
            segments.append(current)
            current = []
    return segments


@pytest.mark.timeout(900)
def test_a_stacked_grid_chooses_and_scores_as_one_lambda_per_trial_and_runs_its_plan(small_grid, every_trial_grid,
                                                                                     tiny_cache, storage):
    """`small_grid` (λ 1 and 1e3 of each stage stacked in one trial) against its first 2 tasks one λ per trial."""
    stacked = json.loads((small_grid / RUN_DIR / "results.json").read_text())
    alone = json.loads((every_trial_grid / RUN_DIR / "results.json").read_text())
    assert_first_tasks_equal(alone, stacked, 2)
    matrix = [row[:2] for row in stacked["accuracy_matrix"][:2]]
    assert (alone["oa"], alone["bwt"], alone["fwt"]) == (overall_accuracy(matrix), backward_transfer(matrix),
                                                         forward_transfer(matrix, stacked["single_task_accuracy"][:2]))
    ours = json.loads((small_grid / MANIFEST).read_text())["stages"]
    theirs = json.loads((every_trial_grid / MANIFEST).read_text())["stages"]
    for mine, other in zip(ours, theirs, strict=False):
        assert mine["selected_lam"] == other["selected_lam"]
        assert [(t["lam"], t["dev_mean"], t["steps"]) for t in mine["trials"]] == \
            [(t["lam"], t["dev_mean"], t["steps"]) for t in other["trials"]]
    # the steps the workers counted are the plan's; a stage's training processes are those the plan starts (Tune
    # reuses a stage's actors: min(2 at once, trials); the test row's process is not a training's)
    for folder, tasks, extra in ((small_grid, 3, []), (every_trial_grid, 2, ["--test-all-trials"])):
        argv = grid_args(tiny_cache, storage, folder.name, tasks, "1,1e3,1e5", *extra)
        args = grid_lambda.build_parser().parse_args(argv)
        _, job, plan = grid.checked_grid(args)
        stages = json.loads((folder / MANIFEST).read_text())["stages"]
        assert [stage["work"]["steps"] for stage in stages] == [cost.steps for cost in grid_plan.plan_costs(job, plan)]
    segments = stage_segments(json.loads((storage / "small.calls.json").read_text()), stacked["tasks"])
    started = [len({entry["pid"] for entry in segment if "step" in entry}) for segment in segments]
    # stage 1: task 1 and the a0 runs of tasks 2, 3; stages 2, 3: a stack of λ 1 and 1e3, and λ 1e5 alone
    assert started == [costs.process_starts(n, 1, 2, test_row=False) for n in (3, 2, 2)] == [2, 2, 2]
    groups = [entry["group"] for entry in json.loads((storage / "small.calls.json").read_text()) if "group" in entry]
    # every λ trial a group: stage 1's λ 0 alone; stages 2, 3: a stack of λ 1 and 1e3, and λ 1e5 a group of one
    assert sorted(groups) == sorted([[0.0], GRID[:2], GRID[2:], GRID[:2], GRID[2:]])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def survivor(stage: dict) -> dict:
    return next(trial for trial in stage["trials"] if trial["selected"])


@pytest.mark.timeout(900)
def test_halving_runs_the_planned_steps_and_its_survivors_are_the_grid_trials_of_their_lambda(
        small_halving, small_grid, tiny_cache, storage):
    entries = json.loads((storage / "halving.calls.json").read_text())
    stages = json.loads((small_halving / MANIFEST).read_text())["stages"]
    # stage 1: task 1 and the a0 run of task 2 (3 steps each); stage 2: three λ to the rung at step 1, the best one
    # on to step 3 (3 + 2)
    assert [stage["work"]["steps"] for stage in stages] == [6, 5]
    assert sum("step" in entry for entry in entries) == 11  # one gradient all-reduce a step, in the workers
    args = grid_lambda.build_parser().parse_args(grid_args(tiny_cache, storage, "halving", 2, "1,1e3,1e5", *HALVING))
    _, job, plan = grid.checked_grid(args)
    planned = grid_plan.plan_costs(job, plan, search=searches.checked(args))
    assert [cost.steps for cost in planned] == [6, 5]
    # dev: task 1's 16 (stage 1); at the rung 8 of each seen task for 3 trials, then the survivor's full dev sets
    # (3 × 16 + 32); test: stage 1's chosen row and the a0 run (2 × 16), then the chosen row (2 × 16)
    assert [stage["work"]["dev_examples"] for stage in stages] == [16, 80]
    assert [stage["work"]["test_examples"] for stage in stages] == [32, 32]
    assert [(cost.dev_examples, cost.test_examples) for cost in planned] == [(16, 32), (80, 32)]
    logged_dev = sum(len(entry["tasks"]) * min(entry["limit"] or 16, 16) for entry in entries
                     if entry.get("split") == "dev")
    assert logged_dev == 16 + 80
    for stage in stages[1:]:
        assert stage["rung_steps"] == [1]
        assert sorted(trial["steps"] for trial in stage["trials"]) == [1, 1, 3]
        assert [trial["cut_at_step"] for trial in stage["trials"] if trial["dev_mean"] is None] == [1, 1]
    # stage 2 starts from the same model in both: the survivor's merged update and dev accuracies are those of the
    # grid's uninterrupted trial of its λ
    ours, theirs = stages[1], json.loads((small_grid / MANIFEST).read_text())["stages"][1]
    kept = survivor(ours)
    same = next(trial for trial in theirs["trials"] if trial["lam"] == kept["lam"])
    update = checkpoints.update_file(1)
    assert sha256(Path(kept["checkpoint"]) / update) == sha256(Path(same["checkpoint"]) / update)
    for key in ("dev_mean", "dev_past", "dev_current"):
        assert kept[key] == same[key], key
    report = (small_halving / "grid_report.md").read_text()
    assert "| 2 | amazon | halving | 3 | 5 | 80 | 32 |" in report and "plots/lambda_task02.png" in report
    assert (small_halving / grid_report.PLOTS / "lambda_task02.png").exists()


@pytest.mark.timeout(600)
def test_a_resubmitted_halving_stage_reruns_only_unrecorded_trials_and_decides_as_before(small_halving, tiny_cache,
                                                                                          storage, calls):
    """The state a driver killed in stage 2 (the last) leaves: the stage's survivor and one trial the search cut have
    no record; the other cut trial has one (at its rung). Resubmitted, only the two run again and the stage ends as
    before."""
    copy_ = storage / "halving-resumed"
    shutil.copytree(small_halving, copy_)
    manifest = json.loads((copy_ / MANIFEST).read_text())
    finished = manifest["stages"].pop()
    Storage(str(copy_)).write_json(MANIFEST, manifest)  # as the driver wrote it then (a manifest changed is refused)
    shutil.rmtree(copy_ / RUN_DIR)
    cut = [trial["lam"] for trial in finished["trials"] if trial["dev_mean"] is None]
    rerun = {survivor(finished)["lam"], cut[0]}
    for lam in rerun:
        (copy_ / "task02" / trials.FINISHED / f"task02-lam{lam:g}.json").unlink()
    entries = logged(calls, grid_args(tiny_cache, storage, "halving-resumed", 2, "1,1e3,1e5", *HALVING))
    assert sorted(entry["lam"] for entry in entries if "train" in entry) == sorted(rerun)
    assert sum("step" in entry for entry in entries) == 3 + 1  # the survivor's whole task, the cut trial to its rung
    again = json.loads((copy_ / MANIFEST).read_text())["stages"][-1]
    for key in ("selected_lam", "work", "rung_steps"):
        assert again[key] == finished[key], key
    for ours, theirs in zip(again["trials"], finished["trials"], strict=True):
        for key in ("lam", "dev_mean", "selected", "steps", "rung_dev", "cut_at_step"):
            assert ours.get(key) == theirs.get(key), key
    results = json.loads((copy_ / RUN_DIR / "results.json").read_text())
    before = json.loads((small_halving / RUN_DIR / "results.json").read_text())
    for key in ("lambdas", "accuracy_matrix", "dev_accuracy_matrix", "oa", "bwt", "fwt"):
        assert results[key] == before[key], key


@pytest.mark.timeout(300)
def test_calibrate_prints_the_plan_with_an_estimate_and_trains_no_grid(tiny_cache, storage, capsys):
    assert grid_lambda.SCRIPT(grid_args(tiny_cache, storage, "calibrated", 2, "1,1e3", "--calibrate")) == 0
    plan = capsys.readouterr().out
    # stage 1: task 1 and the a0 run of task 2 (96 examples each; dev 16, test 16 + 16); stage 2: 2 trials of task 2
    # (dev 2 × (16 + 16), test of the chosen one 16 + 16)
    assert "| total |  | 4 | 384 | 80 | 64 |" in plan
    assert "calibrated on cpu: " in plan and "trial-hours" in plan and "s per fresh process" in plan
    assert not (storage / "calibrated").exists()


@pytest.mark.timeout(120)
def test_the_dry_run_counts_the_steps_and_evaluations_of_both_searches(tiny_cache, storage, capsys):
    args = grid_args(tiny_cache, storage, "planned", 2, "1,1e3", "--dry-run", "--gpus-per-worker", "0", *HALVING)
    assert run_main(grid_lambda.SCRIPT, args) == 0
    plan = capsys.readouterr().out
    # 3 steps a task. Grid: task 1 and the a0 run of task 2, then 2 λ (12 steps, 4 trainings); dev 16 + 2 × 32, test
    # 2 × 16 + 32. Halving: stage 2's λ to the rung at step 1, the better one to step 3 (4 steps: 4 / 3 trainings);
    # dev at the rung 2 × (8 + 8), the survivor's 32
    assert "  grid: 12 optimizer steps, worth 4.0 trainings; evaluated 80 dev + 64 test examples" in plan
    assert "  halving: 10 optimizer steps (83 % of the grid's steps), worth 3.3 trainings; evaluated 80 dev + 64 " \
        "test examples" in plan
    assert "| total |  | 4 | 320 | 80 | 64 | n/a | n/a | 10 |" in plan  # halving's stages: 192 + 96 + 32 trained
    # halving trains one λ per trial; packed, stage 2's 2 λ would be one trial: 2 + 1 trials, processes (2 + 1) +
    # (1 + 1) + 1 to publish (every trial of a stage at once here)
    assert "λ per trial: 1 (a halving search trains one λ per trial)" in plan
    assert "  1: 4 trials, 7 worker processes started; device time 4 trainings, wall 2 trainings one after " \
        "another" in plan
    assert "  stacked: 3 trials, 6 worker processes started; device time 3 to 4 trainings, wall 2 to 3 trainings " \
        "one after another" in plan
    assert not (storage / "planned").exists()


@pytest.mark.timeout(600)
def test_the_plan_packs_auto_as_the_run_did(small_grid, tiny_cache, storage, capsys):
    """`small_grid`'s command as a dry run on the module's Ray, which runs 2 trials at once (2 CPUs, 1 a trial):
    `auto` spreads a stage's 3 λ over them, a stack of λ 1 and 1e3 and λ 1e5 alone, as the run packed them: each of
    its trials left its Tune trial's folder."""
    capsys.readouterr()
    assert grid_lambda.SCRIPT(grid_args(tiny_cache, storage, "small", 3, "1,1e3,1e5", "--dry-run")) == 0
    plan = capsys.readouterr().out.splitlines()
    assert "λ per trial: 2 (--lambdas-per-trial auto: a stage's λ spread over the 2 trial(s) at once); a trial of " \
        "several λ trains them as one stack, from one start, in one process" in plan
    assert [line.rsplit("; ", 1)[-1] for line in plan if line.startswith("stage ")] == \
        ["3 trainings in 3 trial(s)", "3 trainings in 2 trial(s)", "3 trainings in 2 trial(s)"]
    ran = [sorted(path.name for path in (small_grid / f"task{t:02d}").iterdir()
                  if path.is_dir() and path.name not in (trials.FINISHED, grid.CHOSEN, RECORD)) for t in (1, 2, 3)]
    assert ran == [["a0-task02", "a0-task03", "task01-lam0"], ["task02-lam100000", "task02-lams-1-1000"],
                   ["task03-lam100000", "task03-lams-1-1000"]]


@pytest.mark.timeout(180)
def test_a_resubmitted_grid_skips_finished_stages(small_grid, tiny_cache, storage):
    trial_dirs = sorted(p.name for p in small_grid.glob("task*/*") if p.is_dir())
    assert grid_lambda.SCRIPT(grid_args(tiny_cache, storage, "small", 3, "1,1e3,1e5")) == 0
    assert sorted(p.name for p in small_grid.glob("task*/*") if p.is_dir()) == trial_dirs


@pytest.mark.timeout(600)
def test_two_worker_trials_drive_a_torch_trainer(small_grid, tiny_cache, storage):
    """Stage 1 only: a DDP trial is the same Tune trial whatever its stage, and the regulariser of later tasks over two
    workers is checked against the single-process loop in test_train_sequence."""
    args = grid_args(tiny_cache, storage, "two-workers", 1, "1e3", "--workers-per-trial", "2",
                     "--cpus-per-worker", "0.9")
    assert run_main(grid_lambda.SCRIPT, args) == 0
    two = json.loads((storage / "two-workers" / MANIFEST).read_text())["stages"]
    one = json.loads((small_grid / MANIFEST).read_text())["stages"]
    assert len(two) == 1
    assert two[0]["trials"][0]["dev_mean"] == pytest.approx(one[0]["trials"][0]["dev_mean"], abs=1 / 16 + 1e-9)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("extra", "message"), [
    (["--max-concurrent", "3"], "3 concurrent training(s)"),
    (["--gpus-per-worker", "1"], "GPUs"),
    (["--workers-per-trial", "2"], "need 2.01 CPUs"),
    (["--grid", "0,1"], "expected a number > 0, got 0"),
    (["--search", "halving"], "trains a stage's 6 λ at once"),
    (["--search", "halving", "--workers-per-trial", "2", "--cpus-per-worker", "0.5"], "--workers-per-trial 1"),
    (["--search", "halving", "--rungs", "0.5,0.2"], "increasing fractions"),
    (["--eta", "2"], "add --search halving"),
    (["--lambdas-per-trial", "2", "--search", "halving"], "--lambdas-per-trial 2: a halving search trains one λ"),
    (["--lambdas-per-trial", "0"], "expected auto or a number ≥ 1, got 0"),
])
def test_requests_beyond_the_cluster_or_bad_values_are_refused(tiny_cache, storage, capsys, extra, message):
    args = cli_args(tiny_cache, storage, "--order", "1", "--max-tasks", "2", "--name", "refused", *extra)
    assert run_main(grid_lambda.SCRIPT, args) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error and error.count("\n") == 1
    assert not (storage / "refused").exists()


@pytest.mark.timeout(900)
def test_a_grid_of_two_seeds_chooses_on_their_mean_and_each_seed_carries_on_from_its_own_model(tiny_cache, storage,
                                                                                                calls):
    """2 tasks, λ 1 and 1e3, `--seeds 1,2`: the λ chosen is the one the mean over the seeds of the manifest's dev
    means picks; each seed's stage 2 started from its own stage-1 choice; one run per seed, read by `report` as the
    seeds of one configuration; a stage interrupted after all but one (λ, seed) trial reruns that one alone."""
    from jumplora.report.runs import collect

    argv = grid_args(tiny_cache, storage, "seeds", 2, "1,1e3", "--seeds", "1,2", "--no-tracking")
    logged(calls, argv)
    folder = storage / "seeds"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["job"]["seeds"] == [1, 2] and manifest["job"]["run"]["seed"] == 1
    first, second = manifest["stages"]
    assert first["seeds"] == second["seeds"] == [1, 2]
    dev = {(t["seed"], t["lam"]): t["dev_mean"] for t in second["trials"]}
    assert sorted(dev) == [(1, 1.0), (1, 1e3), (2, 1.0), (2, 1e3)]
    means = {lam: (dev[1, lam] + dev[2, lam]) / 2 for lam in (1.0, 1e3)}
    expected = min(lam for lam, mean in means.items() if mean >= max(means.values()) - 1e-12)  # SPEC §5's rule
    assert second["selected_lam"] == expected
    assert [(t["seed"], t["lam"]) for t in second["trials"] if t["selected"]] == [(1, expected), (2, expected)]
    # each seed's stage-2 trials hold the task-1 update of its own stage-1 choice (the seeds' differ)
    update = checkpoints.update_file(0)
    starts = {seed: sha256(Path(path) / update)
              for seed, path in zip(first["seeds"], first["checkpoints"], strict=True)}
    assert starts[1] != starts[2]
    assert all(sha256(Path(t["checkpoint"]) / update) == starts[t["seed"]] for t in second["trials"])
    runs = collect([str(folder)])
    assert sorted(run.seed for run in runs) == [1, 2] and len({run.label for run in runs}) == 1
    assert all(run.results.lambdas == [0.0, expected] for run in runs)
    for run in runs:  # each seed's run: its chosen trials' test rows
        chosen = [next(t for t in stage["trials"] if t["seed"] == run.seed and t["selected"])
                  for stage in (first, second)]
        assert [math.fsum(row[: t + 1]) / (t + 1) for t, row in enumerate(run.results.accuracy_matrix)] == \
            pytest.approx([c["test_mean"] for c in chosen], abs=1e-12)
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["seed1", "seed2"]
    assert not (folder / RUN_DIR).exists()

    # a driver killed in stage 2 after every trial but seed 2's λ 1e3 finished: resubmitted, only that one trains
    manifest["stages"].pop()
    Storage(str(folder)).write_json(MANIFEST, manifest)  # as the driver wrote it then (a manifest changed is refused)
    (folder / "seed2" / "task02" / trials.FINISHED / "task02-lam1000.json").unlink()
    trained = [(entry["train"], entry["lam"], entry["seed"]) for entry in logged(calls, argv)
               if "train" in entry and "lam" in entry]
    assert trained == [(second["task_name"], 1e3, 2)]
    again = json.loads((folder / MANIFEST).read_text())["stages"][-1]
    assert again["selected_lam"] == expected
    assert [(t["seed"], t["lam"], t["dev_mean"]) for t in again["trials"]] == \
        [(t["seed"], t["lam"], t["dev_mean"]) for t in second["trials"]]
