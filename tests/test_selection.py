"""`grid_lambda.py --select`: on a made-up stage whose dev flags are written by hand, `1se` chooses the largest λ
within one standard error (of the paired difference to the best) of the best, worked out below; `best` chooses as
SPEC §5 says; the grid's report marks the λ the data cannot tell from the best and says when a choice is arbitrary
(every λ within one SE of the best) or at the grid's edge; the rule is part of a grid's identity."""

import dataclasses
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


def test_the_lambda_plot_draws_each_lambdas_standard_error(tmp_path):
    """The plot's bars are the rule's yardstick (one SE of the paired difference, in points), not a fixed band."""
    from jumplora import guidance

    record = StageRecord(task=3, task_name="yahoo", selected_lam=1.0,
                         trials=[*trials()[:4], TrialRecord(lam=1e4, dev_mean=None, rung_dev_mean=0.9, cut_at_step=4)])
    drawn = guidance.lambda_plot(record, tmp_path / "l.png")
    assert drawn["se"][:3] == pytest.approx([0.0, 100 * SE_10, 100 * SE_100]) and drawn["se"][3:] == [None, None]


def S(lam, mean, se, within):  # noqa: N802 - a λ's standing, written out by hand
    return selection.Standing(lam, mean, se, within)


SMOKE = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]  # the smoke grid, where λ has no effect at 3 steps


def test_a_choice_among_lambdas_the_data_cannot_tell_apart_says_so():
    tied = [S(lam, 0.40625, 0.0, True) for lam in SMOKE]
    assert selection.choice_notes(tied, 1e5) == [  # 1se's tie-break: the largest; not also an edge line
        "λ made no difference the data can see at this size (every λ has the same mean dev accuracy); "
        "λ = 100000 chosen by the rule's tie-break"]
    assert selection.choice_notes(tied, 1.0) == [  # best's: the smallest
        "λ made no difference the data can see at this size (every λ has the same mean dev accuracy); "
        "λ = 1 chosen by the rule's tie-break"]
    close = [S(1.0, 0.55, 0.06, True), S(10.0, 0.60, 0.0, True), S(100.0, 0.58, 0.03, True)]
    assert selection.choice_notes(close, 10.0) == [
        "λ made no difference the data can see at this size (every λ is within one standard error of the best); "
        "λ = 10 chosen by the rule's tie-break"]
    # a search cut λ 1e3 (told apart at a rung): the line speaks of the λ that trained to the end
    assert selection.choice_notes(close, 100.0, [1.0, 10.0, 100.0, 1e3]) == [
        "among the λ that trained to the end (a search cut the others), λ made no difference the data can see at "
        "this size (every λ is within one standard error of the best); λ = 100 chosen by the rule's tie-break"]


def test_a_lambda_chosen_at_an_end_of_the_grid_says_the_best_may_lie_beyond():
    rising = [S(1.0, 0.50, 0.05, False), S(10.0, 0.60, 0.04, False), S(1e5, 0.70, 0.0, True)]
    assert selection.choice_notes(rising, 1e5) == [
        "λ = 100000 is the largest λ of the grid: the best may lie above it, outside the grid"]
    falling = [S(1.0, 0.70, 0.0, True), S(10.0, 0.69, 0.02, True), S(100.0, 0.50, 0.05, False)]
    assert selection.choice_notes(falling, 1.0) == [
        "λ = 1 is the smallest λ of the grid: the best may lie below it, outside the grid"]
    assert selection.choice_notes(falling, 10.0) == []  # inside the grid, and the data tell 100 apart: nothing to add
    # the end of the grid tried, not of the λ that trained to the end: a search cut λ 0.1
    assert selection.choice_notes(falling, 1.0, [0.1, 1.0, 10.0, 100.0]) == []
    # no λ lies below 0
    assert selection.choice_notes([S(0.0, 0.70, 0.0, True), S(1.0, 0.50, 0.05, False)], 0.0) == []


def test_a_grid_of_one_lambda_chose_nothing_and_says_nothing():
    assert selection.choice_notes([S(0.0, 0.7, 0.0, True)], 0.0) == []  # stage 1: λ = 0 only
    assert selection.choice_notes([S(10.0, 0.7, 0.0, True)], 10.0) == []


def test_the_grid_report_prints_each_stages_notes_under_a_legend_that_claims_no_converse(monkeypatch):
    from ray_jobs import grid_report

    monkeypatch.setattr(grid_report, "format_summary", lambda results: "(summary)")
    flags = [pack([1, 0])]  # the same flags for every λ: a paired difference of 0, every λ ties
    records = [StageRecord(task=1, task_name="dbpedia", selected_lam=0.0,
                           trials=[TrialRecord(lam=0.0, dev_mean=0.5, dev_flags=flags, selected=True)]),
               StageRecord(task=2, task_name="amazon", selected_lam=1e5,
                           trials=[TrialRecord(lam=lam, dev_mean=0.5, dev_flags=flags, selected=lam == 1e5)
                                   for lam in (1.0, 1e5)]),
               StageRecord(task=3, task_name="yahoo", selected_lam=1.0,  # λ 100 is told from the best, λ 1
                           trials=[dataclasses.replace(trial, selected=trial.lam == 1.0) for trial in trials()])]
    text = grid_report.report_text(records, None, selection.ONE_SE).splitlines()
    assert text[0].endswith(
        "; = : within one standard error (of the paired difference) of the best, so the data cannot tell it from the "
        "best; a λ without = is not thereby shown worse (one SE is about a 68 % band), * : chosen:")
    assert [line for line in text if line.startswith("- ")] == [
        "- task 2 amazon: λ made no difference the data can see at this size (every λ has the same mean dev "
        "accuracy); λ = 100000 chosen by the rule's tie-break",
        "- task 3 yahoo: λ = 1 is the smallest λ of the grid: the best may lie below it, outside the grid"]
    # the chosen λ's dev mean ± its own SE over its dev examples, √(Σ_j s²_j / n_j) / t (ddof = 1): stage 1's and 2's
    # one task [1, 0]: s² = 1/2, √(1/2 / 2) = 0.5; stage 3's λ 1, tasks (1, 1, 1, 0) and (1, 1, 0, 0): s² = 1/4 and
    # 1/3, √(1/4 / 4 + 1/3 / 4) / 2 ≈ 0.1909
    assert text[1].split(" | ")[3] == "mean dev accuracy over tasks 1..t (%) ± its SE over the dev examples (points)"
    assert [line.split(" | ")[3] for line in text[3:6]] == ["50.00 ± 50.00", "50.00 ± 50.00", "62.50 ± 19.09"]


def test_a_chosen_lambda_recorded_before_its_dev_flags_prints_its_mean_alone():
    from jumplora import guidance

    assert guidance.dev_mean_text(TrialRecord(lam=1e3, dev_mean=0.6)) == "60.00"


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
