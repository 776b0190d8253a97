"""`grid_lambda.py --select`: on a made-up stage whose dev flags are written by hand, `1se` chooses the largest λ
within one standard error (of the paired difference to the best) of the best, worked out below; `best` chooses as
SPEC §5 says; the grid's report marks the λ the data cannot tell from the best; the rule is part of a grid's
identity."""

import math

import pytest

from jumplora import selection
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.flags import pack
from jumplora.results import StageRecord, TrialRecord

# two seen tasks of 4 dev examples each; per λ the flags of task 1, then task 2
FLAGS = {1.0: ([1, 1, 1, 0], [1, 1, 0, 0]),  # 0.75, 0.50: mean 0.625, the best
         10.0: ([1, 1, 0, 0], [1, 0, 1, 0]),  # 0.50, 0.50: mean 0.500
         100.0: ([1, 0, 0, 0], [1, 1, 0, 0])}  # 0.25, 0.50: mean 0.375
# λ 10 − best, per example: task 1 (0, 0, −1, 0): sample variance ((3·0.25² + 0.75²) / 3) = 1/4; task 2
# (0, −1, 1, 0): 2/3. SE = √(1/4 / 4 + 2/3 / 4) / 2 = √(11/48) / 2 ≈ 0.2394 > its gap 0.125: within one SE.
# λ 100 − best: task 1 (0, −1, −1, 0): 4·0.5² / 3 = 1/3; task 2 all 0. SE = √(1/3 / 4) / 2 ≈ 0.1443 < 0.25: outside.
SE_10, SE_100 = math.sqrt(11 / 48) / 2, math.sqrt(1 / 12) / 2


def trials() -> list[TrialRecord]:
    made = [TrialRecord(lam=lam, dev_mean=(sum(a) / 4 + sum(b) / 4) / 2, dev_flags=[pack(a), pack(b)])
            for lam, (a, b) in FLAGS.items()]
    # λ 1e3 close to the best but recorded before flags were kept: no SE, so within only on a tie; 1e4 cut by a search
    return made + [TrialRecord(lam=1e3, dev_mean=0.6), TrialRecord(lam=1e4, dev_mean=None, rung_dev_mean=0.9)]


def test_1se_takes_the_largest_lambda_within_one_standard_error_and_best_the_highest_mean():
    from jumplora import guidance
    from ray_jobs import grid, grid_report, search

    found = {s.lam: s for s in guidance.standings(trials())}
    assert list(found) == [1.0, 10.0, 100.0, 1e3]
    assert (found[1.0].se, found[10.0].se, found[100.0].se, found[1e3].se) == pytest.approx((0.0, SE_10, SE_100, None))
    assert [found[lam].within for lam in found] == [True, True, False, False]
    assert search.select(trials(), selection.ONE_SE).lam == 10.0
    assert search.select(trials(), selection.BEST).lam == search.select(trials()).lam == 1.0
    # λ 1e3 ties the best: within (no SE needed), and the largest such
    tied = trials()[:3] + [TrialRecord(lam=1e3, dev_mean=0.625)]
    assert search.select(tied, selection.ONE_SE).lam == 1e3 and search.select(tied).lam == 1.0

    record = StageRecord(task=3, task_name="yahoo", selected_lam=10.0, trials=trials())
    assert grid_report.lambda_table(record) == (
        "1: 62.50 ± 0.00 =; 10: 50.00 ± 23.94 =*; 100: 37.50 ± 14.43; 1000: 60.00")
    header, rows = grid.trial_table([record])
    se, within = header.index("dev_se_to_best_pct"), header.index("within_1se_of_best")
    assert [(row[se], row[within]) for row in rows] == [("0.00", "yes"), ("23.94", "yes"), ("14.43", "no"),
                                                        ("", ""), ("", "")]


def test_a_grid_chosen_by_another_rule_is_another_grid(tmp_path):
    """The rule is part of the grid's identity in its manifest: a `best` grid's folder refuses `--select 1se`."""
    from jumplora.storage import MANIFEST, Storage
    from ray_jobs import cluster, grid, jobs, search

    job = jobs.Job(RunConfig(order=1, max_tasks=2, lambdas=[0.0] * 2), str(tmp_path / "cache"))
    stages = grid.plan(("dbpedia", "amazon"), [1.0, 10.0])
    folder = Storage(str(tmp_path / "grid"))
    folder.write_json(MANIFEST, {"job": {**job.identity(), "lambdas_tried": [[0.0], [1.0, 10.0]]}, "stages": []})
    with pytest.raises(JumpLoRAError, match="holds a grid of another configuration"):
        grid.run_grid(folder, job, stages, cluster.WorkerRequest(), 1, way=search.Grid(rule=selection.ONE_SE))
