"""`grid_lambda.py --seeds`: the λ chosen on the mean dev accuracy over seeds with an SE over them (worked out by
hand below), a stage record of several seeds read back as written (one seed's written as before seeds), a one-seed
grid's identity unchanged, the refusals, and the plan's counts over the seeds."""

import math

import pytest

from jumplora import selection
from jumplora.config import RunConfig
from jumplora.flags import pack
from jumplora.results import StageRecord, TrialRecord

# 3 seeds × 3 λ: each seed's mean dev accuracy of each λ
SEED_MEANS = [{1.0: 0.70, 10.0: 0.61, 100.0: 0.60},
              {1.0: 0.66, 10.0: 0.69, 100.0: 0.62},  # alone, this seed would choose λ 10
              {1.0: 0.68, 10.0: 0.65, 100.0: 0.64}]
# means over the seeds: λ 1 0.68 (the best), λ 10 0.65, λ 100 0.62.
# λ 10 − λ 1 per seed: −0.09, +0.03, −0.03: mean −0.03, deviations −0.06, +0.06, 0, S² = 0.0072 / 2 = 0.0036,
# SE = √(0.0036 / 3) = √0.0012 ≈ 0.03464 > its gap 0.03: within one SE.
# λ 100 − λ 1: −0.10, −0.04, −0.04: mean −0.06, deviations −0.04, +0.02, +0.02, S² = 0.0024 / 2 = 0.0012,
# SE = √(0.0012 / 3) = 0.02 < 0.06: outside.
SE_10, SE_100 = math.sqrt(0.0012), 0.02


def test_the_lambda_is_chosen_on_the_mean_over_seeds_with_an_se_over_the_seeds():
    found = {s.lam: s for s in selection.seed_standings(SEED_MEANS)}
    assert [found[lam].dev_mean for lam in (1.0, 10.0, 100.0)] == pytest.approx([0.68, 0.65, 0.62], abs=1e-12)
    assert [found[lam].se for lam in (1.0, 10.0, 100.0)] == pytest.approx([0.0, SE_10, SE_100], abs=1e-12)
    assert [found[lam].within for lam in (1.0, 10.0, 100.0)] == [True, True, False]
    assert selection.choose(list(found.values()), selection.BEST) == 1.0
    assert selection.choose(list(found.values()), selection.ONE_SE) == 10.0
    assert selection.choose(selection.standings(SEED_MEANS[1])) == 10.0  # one seed alone chooses otherwise


def test_seeds_that_agree_exactly_take_the_se_of_their_dev_examples():
    """Two seeds with the same flags: the spread over seeds is 0, so the SE is the dev examples' alone."""
    flags = {1.0: [pack([1, 1, 0, 0])], 10.0: [pack([1, 0, 0, 0])]}  # 0.5 and 0.25 on one task of 4 examples
    means = {1.0: 0.5, 10.0: 0.25}
    # λ 10 − λ 1 per example (0, −1, 0, 0): sample variance (3 · 0.25² + 0.75²) / 3 = 0.25, a seed's SE √(0.25 / 4)
    # = 0.25; over two seeds √(0.25² + 0.25²) / 2 ≈ 0.1768 < the gap 0.25
    found = {s.lam: s for s in selection.seed_standings([means, means], [flags, flags])}
    assert found[10.0].se == pytest.approx(math.sqrt(2 * 0.25 ** 2) / 2, abs=1e-12)
    assert not found[10.0].within and found[1.0].se == 0.0
    unknown = {s.lam: s for s in selection.seed_standings([means, means])}  # no flags: no SE
    assert unknown[10.0].se is None and not unknown[10.0].within


def test_one_seed_is_the_one_seed_rule():
    flags = {1.0: [pack([1, 1, 0, 0])], 10.0: [pack([1, 0, 1, 0])]}
    means = {1.0: 0.5, 10.0: 0.5}
    assert selection.seed_standings([means], [flags]) == selection.standings(means, flags)


def stage_of_seeds() -> StageRecord:
    trials = [TrialRecord(lam=lam, dev_mean=SEED_MEANS[s][lam], seed=seed, selected=lam == 1.0,
                          checkpoint=f"/g/seed{seed}/task02/lam{lam:g}")
              for s, seed in enumerate((1, 2, 3)) for lam in (1.0, 10.0, 100.0)]
    return StageRecord(task=2, task_name="amazon", selected_lam=1.0, trials=trials,
                       baselines=[{"task": 2, "a0": 0.5, "seed": seed} for seed in (1, 2, 3)],
                       seeds=[1, 2, 3], checkpoints=[f"/g/seed{seed}/task02/chosen" for seed in (1, 2, 3)])


def test_a_stage_of_several_seeds_reads_back_and_one_seed_writes_as_before():
    from jumplora import guidance
    from ray_jobs import grid_report

    record = stage_of_seeds()
    data = record.to_json()
    assert data["seeds"] == [1, 2, 3] and data["checkpoint"] is None
    assert [trial["seed"] for trial in data["trials"]] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    again = StageRecord.from_json(data)
    assert again == record and again.start(2) == "/g/seed2/task02/chosen"
    one = StageRecord(task=2, task_name="amazon", selected_lam=1.0, checkpoint="/g/task02/chosen",
                      trials=[TrialRecord(lam=1.0, dev_mean=0.5, selected=True)])
    assert list(one.to_json()) == ["task", "task_name", "selected_lam", "checkpoint", "trials", "baselines", "seconds"]
    assert "seed" not in one.to_json()["trials"][0] and one.start() == "/g/task02/chosen"
    # the report's line of the stage: λ over the seeds as worked out above; the chosen λ's dev means 0.70, 0.66,
    # 0.68: mean 68.00, SE √(((0.02)² + (0.02)²) / 2 / 3) = √(0.0004 / 3) ≈ 1.15 points
    assert grid_report.lambda_table(record) == "1: 68.00 ± 0.00 =*; 10: 65.00 ± 3.46 =; 100: 62.00 ± 2.00"
    assert guidance.chosen_dev_text(record) == "68.00 ± 1.15 over 3 seeds"
    header, rows = grid_report.trial_table([record])
    assert header[3] == "seed" and [row[3] for row in rows] == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_a_one_seed_grid_keeps_its_identity(tmp_path):
    from ray_jobs import grid, grid_lambda, jobs, search
    from ray_jobs.manifest import grid_identity

    job = jobs.Job(RunConfig(order=1, max_tasks=2, lambdas=[0.0] * 2), str(tmp_path / "cache"))
    stages = grid.plan(("dbpedia", "amazon"), [1.0, 10.0])
    before = {**job.identity(), "lambdas_tried": [[0.0], [1.0, 10.0]]}  # a grid's identity before seeds
    assert grid_identity(job, stages, search.PLAIN) == grid_identity(job, stages, search.PLAIN, None) == before
    assert grid_identity(job, stages, search.PLAIN, (1, 2)) == {**before, "seeds": [1, 2]}
    # `--seeds 7` is the one-seed grid of `--seed 7`: the same job, so the same folder resumes
    base = ["--order", "1", "--preset", "smoke", "--max-tasks", "2", "--cache-dir", str(tmp_path / "cache")]
    one, seven = (grid_lambda.build_parser().parse_args(base + extra) for extra in (["--seed", "7"], ["--seeds", "7"]))
    assert grid.checked_seeds(seven, search.PLAIN) is None
    assert grid.checked_grid(seven)[1] == grid.checked_grid(one)[1]


@pytest.mark.parametrize(("extra", "message"), [
    (["--seed", "3", "--seeds", "1,2"], "error: --seed and --seeds both given: give the grid's seeds in --seeds "
                                        "alone, e.g. --seeds 1,2,3\n"),
    (["--seeds", "1,1", "--no-tracking"], "error: argument --seeds: '1,1' lists 1 twice: give each value once (see "
                                          "grid_lambda.py --help)\n"),
    (["--seeds", "1,2", "--no-tracking", "--search", "halving"],
     "error: --seeds: --search halving compares a seed's λ at rungs; with several seeds use --search grid\n"),
    (["--seeds", "1,2"], "error: --seeds: a grid of several seeds is not logged to MLflow; add --no-tracking (then "
                         "`jumplora track <storage>/<name>/runs/seed<S>` logs each seed's run)\n"),
])
def test_bad_seeds_are_refused_in_one_line(tmp_path, capsys, extra, message):
    from ray_jobs import grid_lambda
    from ray_jobs.cli import run_main

    argv = ["--order", "1", "--preset", "smoke", "--max-tasks", "2", "--cache-dir", str(tmp_path / "cache"),
            "--storage-path", str(tmp_path / "storage"), *extra]
    assert run_main(grid_lambda.SCRIPT, argv) == 2
    assert capsys.readouterr().err == message
    assert not any(tmp_path.iterdir())


def test_the_plan_counts_every_seed(tmp_path, capsys):
    """Smoke preset, 2 tasks of 96 training, 16 dev and 16 test examples, 3 optimizer steps a training; a seed's
    stage 1: task 1 and the a0 run of task 2 (192 trained, dev 16, test 16 + 16), stage 2: λ 1 and 1e3 (192 trained,
    dev 2 × 32, test of the chosen trial 32): 4 trainings, 384, 80 and 64 a seed, twice."""
    from ray_jobs import grid_lambda
    from ray_jobs.cli import run_main

    argv = ["--order", "1", "--preset", "smoke", "--max-tasks", "2", "--grid", "1,1e3", "--seeds", "1,2",
            "--no-tracking", "--dry-run", "--gpus-per-worker", "0", "--max-concurrent", "2",
            "--cache-dir", str(tmp_path / "cache"), "--storage-path", str(tmp_path / "storage")]
    assert run_main(grid_lambda.SCRIPT, argv) == 0
    plan = capsys.readouterr().out.splitlines()
    assert ", seeds 1, 2 (each stage trains every λ on each seed, one seed's trials after another's; the λ chosen " \
        "on the mean dev accuracy over the seeds, each seed carrying on from its own model with it), preset smoke" \
        in plan[0]
    assert [line.rsplit("; ", 1)[-1] for line in plan if line.startswith("stage ")] == \
        ["4 trainings in 4 trial(s), 2 a seed", "4 trainings in 4 trial(s), 2 a seed"]
    assert next(line for line in plan if line.startswith("| total |")).startswith("| total |  | 8 | 768 | 160 | 128 |")
    assert "8 trainings of one task each; per trial 1 worker(s) × (1 CPU, 0 GPU) (training on CPU); 2 at once" in plan
    # per stage and seed 2 trials at once and the chosen trial's test row: 3 processes, twice; a publish per seed
    assert "worker processes started (each pays the device's cold start once; on a CPU Ray may reuse a task's): 14 " \
        "(per stage 6, 6; 2 to publish)" in plan
    assert "(--search halving not compared: it searches one seed)" in plan
    assert plan[-1] == f"storage: {tmp_path / 'storage'}/grid-order1-jumplora+ella-global-sparse-smoke-seeds1-2"
    assert not (tmp_path / "storage").exists()
