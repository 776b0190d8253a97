"""The grid's cost plan, counted by hand on a three-task order (batch 4: tasks a, b, c train 3, 5 and 8 steps); how a
stage packs its λ into trials."""

from __future__ import annotations

from jumplora.calibration import Rates
from jumplora.config import RunConfig
from jumplora.storage import Storage
from ray_jobs import costs, jobs, stages
from ray_jobs.cluster import WorkerRequest
from ray_jobs.costs import Cost, Split
from ray_jobs.halving import Halving
from ray_jobs.search import PLAIN

TASKS = ("a", "b", "c")
SIZES = {task: {"train": Split(n_train, 100 * n_train), "dev": Split(n_dev, 100 * n_dev),
                "test": Split(n_test, 100 * n_test)}
         for task, n_train, n_dev, n_test in (("a", 10, 1, 4), ("b", 20, 2, 5), ("c", 30, 3, 6))}


def test_stage_one_trains_task_one_and_the_single_task_runs():
    # task a once (λ = 0) and the a0 runs of b and c; dev of a; test of a (chosen) and of b, c (a0 runs)
    assert costs.stage_cost(0, 1, (1, 2), TASKS, SIZES, test_all=False, batch_size=4) == \
        Cost(trainings=3, train_examples=60, dev_examples=1, test_examples=15, train_tokens=6000, eval_tokens=1600,
             steps=3 + 5 + 8)


def test_later_stages_test_the_chosen_trial_once_unless_every_trial_is_tested():
    # 3 trials of task b: dev of a, b in each (3 × 3); test of a, b once (9) or in each trial (27)
    lean = costs.stage_cost(1, 3, (), TASKS, SIZES, test_all=False, batch_size=4)
    assert lean == Cost(trainings=3, train_examples=60, dev_examples=9, test_examples=9, train_tokens=6000,
                        eval_tokens=1800, steps=3 * 5)
    every = costs.stage_cost(1, 3, (), TASKS, SIZES, test_all=True, batch_size=4)
    assert (every.dev_examples, every.test_examples, every.eval_tokens) == (9, 27, 3600)


def test_totals_and_unknown_tokens():
    unknown = {task: {split: Split(size.examples, None) for split, size in splits.items()}
               for task, splits in SIZES.items()}
    stage = costs.stage_cost(2, 2, (), TASKS, unknown, test_all=False, batch_size=4)
    assert stage == Cost(2, 60, 12, 15, None, None, 16)
    assert Cost(1, 2, 3, 4, 5, 6) + Cost(10, 20, 30, 40, 50, 60) == Cost(11, 22, 33, 44, 55, 66)
    assert (Cost(1, 1, 1, 1, None, 1) + Cost(1, 1, 1, 1, 1, 1)).train_tokens is None
    text = costs.table([("1", "a"), ("3", "c")], [Cost(1, 2, 3, 4, 5, 6), stage])
    assert text.splitlines()[-1] == "| total |  | 3 | 62 | 15 | 19 | n/a | n/a | 16 |"


def test_process_starts_per_stage_counted_by_hand():
    # one worker per trial: 6 trials, 4 at once → Tune starts 4 actors and reuses them; + the test row's task
    assert costs.process_starts(6, workers=1, concurrent=4, test_row=True) == 5
    assert costs.process_starts(3, workers=1, concurrent=4, test_row=False) == 3
    # two workers per trial: every trial's TorchTrainer starts its own two
    assert costs.process_starts(6, workers=2, concurrent=4, test_row=True) == 13


def test_a_halving_stage_counts_the_steps_to_each_rung_and_the_rung_subsets():
    # stage 3 (task c, 30 examples, 8 steps at batch 4), 6 λ; rung 1/4 → step 2, rung 1/2 → step 4; η 3: 6 → 2 → 1;
    # rung subsets of 2 examples (a has 1 dev example, b 2, c 3: 1 + 2 + 2 = 5 a rung evaluation)
    layout = Halving((0.25, 0.5), 3, 2)
    cost = layout.stage_cost(2, 6, (), TASKS, SIZES, test_all=False, batch_size=4)
    assert cost.steps == 4 * 2 + 1 * 4 + 1 * 8  # four cut at step 2, one at step 4, one to the end
    assert cost.train_examples == 4 * 8 + 16 + 30  # 4 examples a step; the last batch of the epoch has 2
    assert cost.dev_examples == (6 + 2) * 5 + 1 * 6  # 6 trials at rung 1, 2 at rung 2; the survivor's full dev sets
    assert cost.test_examples == 4 + 5 + 6  # the chosen trial's row
    assert (cost.trainings, cost.train_tokens, cost.eval_tokens) == (6, None, None)
    # stage 1 is never halved: task 1 and the a0 runs, as the grid
    assert layout.stage_cost(0, 1, (1, 2), TASKS, SIZES, False, 4) == \
        costs.stage_cost(0, 1, (1, 2), TASKS, SIZES, False, 4)


def test_both_packings_of_the_lambda_counted_by_hand():
    # stage 1: one λ and an a0 run; stage 2: 3 λ; 2 trials at once, one CPU each; 0.1 s a training example, 0.01 s
    # an evaluated one, 5 s a fresh process
    stages = [Cost(trainings=2, train_examples=20, dev_examples=1, test_examples=9),
              Cost(trainings=3, train_examples=60, dev_examples=9, test_examples=9)]
    rates = Rates(train_seconds=0.1, eval_seconds=0.01, device="cpu", cold_start_seconds=5.0)
    text = costs.compare_packings([1, 3], [1, 0], stages, WorkerRequest(), 2, True, rates).splitlines()
    # one λ per trial: trials 2 + 3, processes (2 + 1) + (2 + 1) + 1 to publish, rounds 1 + 2; device seconds
    # (2.1 + 3 × 5) + (6.18 + 3 × 5) = 38.28, a training 8.28 / 5 + 5 = 6.656 s; wall 17.1 / 2 + 21.18 / 2 = 19.14 s
    assert text[1] == "  1: 5 trials, 7 worker processes started; device time 5 trainings, wall 3 trainings one " \
        "after another; calibrated, at most 0.011 CPU-hours (worth 5.8 trainings), about 0.005 h wall"
    # stacked: stage 2 in one trial (as long as 1 to 3 trainings): processes 3 + 2 + 1, device (2.1 + 15) +
    # (6.18 + 10) = 33.28 s, wall 17.1 / 2 + 16.18 = 24.73 s
    assert text[2] == "  stacked: 3 trials, 6 worker processes started; device time 3 to 5 trainings, wall 2 to 4 " \
        "trainings one after another; calibrated, at most 0.009 CPU-hours (worth 5.0 trainings), about 0.007 h wall"


def test_lambdas_per_trial_auto_stacks_a_stage_on_a_cpu_and_not_on_a_gpu_nor_when_one_lambda_only():
    cpu, gpu = WorkerRequest(), WorkerRequest(gpus=1.0)
    assert stages.lambdas_per_trial(stages.AUTO, 6, cpu, one_only=False) == 6  # one trial at a time
    # spread over the trials that run at once: 6 λ on 2 slots, 3 + 3; on 4 slots 2 + 2 + 2; 7 on 3 slots 3 + 3 + 1
    assert [stages.lambdas_per_trial(stages.AUTO, n, cpu, False, slots)
            for n, slots in ((6, 2), (6, 4), (7, 3), (3, 8))] == [3, 2, 3, 1]
    assert stages.lambdas_per_trial(stages.AUTO, 6, gpu, one_only=False) == 1
    assert stages.lambdas_per_trial(4, 6, gpu, one_only=False) == 4
    assert stages.lambdas_per_trial(8, 6, cpu, one_only=False) == 6
    assert stages.lambdas_per_trial(stages.AUTO, 6, cpu, one_only=True) == 1
    assert stages.one_lambda_only("jumplora+ella", PLAIN, test_all=False) is None
    assert stages.one_lambda_only("ewc", PLAIN, test_all=False) == "ewc trains every weight: one λ per trial"
    assert "halving" in stages.one_lambda_only("ella", Halving.default(), test_all=False)
    assert "--test-all-trials" in stages.one_lambda_only("ella", PLAIN, test_all=True)


def test_a_stage_packs_only_its_unfinished_lambda_and_keeps_each_lambdas_result_id(tmp_path):
    stage = stages.Stage(1, "b", (1.0, 1e3, 1e5, 1e7))
    job = jobs.Job(RunConfig(order=1, lambdas=[0.0, 0.0]), str(tmp_path))
    packed = stages.pack(stage, job, 2, {"task02-lam1000"}, Storage(str(tmp_path)).child(stage.name), rungs=None)
    # every trial a λ group: the finished λ a group of its own (skipped by run_trials); 1, 1e5 stack; 1e7 alone is a
    # group of one, named by its λ's id
    assert [trial.id for trial in packed] == ["task02-lam1000", "task02-lams-1-100000", "task02-lam1e+07"]
    assert all(isinstance(trial.work, jobs.LambdaGroup) for trial in packed)
    group = packed[1].work
    assert (group.task, group.lambdas, group.ids) == (1, (1.0, 1e5), ("task02-lam1", "task02-lam100000"))
    assert group.folder == f"{tmp_path}/task02/task02-lams-1-100000" and not group.test
    assert packed[1].results == group.ids and packed[2].results == ("task02-lam1e+07",)
    assert packed[0].work.lambdas == (1e3,) and packed[2].work.lambdas == (1e7,)
    first = stages.Stage(0, "a", (0.0,), (1, 2))
    tested = stages.pack(first, job, 1, set(), Storage(str(tmp_path)).child(first.name), test=True)
    assert [trial.id for trial in tested] == ["a0-task02", "a0-task03", "task01-lam0"]
    assert [trial.work.task for trial in tested[:2]] == [1, 2] and tested[2].work.test
