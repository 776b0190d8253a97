"""The intervals of `jumplora.uncertainty` on small made-up flag sets, each against a value worked out by hand or an
independent computation: Wilson against its closed formula, bootstrap intervals whose answer the flags fix, BWT's
paired resampling against an enumeration of every resample, a comparison's verdict, a λ's paired standard error."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from jumplora import flags, uncertainty
from jumplora.errors import JumpLoRAError
from jumplora.results import RunResults
from jumplora.uncertainty import Interval

Z = 1.959963984540054  # the standard normal's 97.5 % quantile


def run(test: list[list[list[bool]]], a0: list[list[bool]] | None = None, fingerprint: str = "data",
        tasks: list[str] | None = None, digests: list[str] | None = None) -> RunResults:
    """A run whose test cells hold these flags (row i: tasks j ≤ i); its accuracies, OA and BWT from them by hand;
    `digests`: its tasks' test fingerprints (None: a run written before they were kept)."""
    size = len(test)
    a = [[sum(cell) / len(cell) for cell in row] + [None] * (size - len(row)) for row in test]
    oa = 100 * sum(a[-1]) / size
    bwt = 100 * sum(a[-1][j] - a[j][j] for j in range(size - 1)) / (size - 1) if size > 1 else 0.0
    return RunResults(order=1, tasks=tasks or [f"task{j}" for j in range(size)], method="m", seed=1, oa=oa, bwt=bwt,
                      accuracy_matrix=a, data_fingerprint=fingerprint, test_fingerprints=digests,
                      fwt=None if a0 is None else
                      100 * sum(a[j][j] - sum(cell) / len(cell) for j, cell in enumerate(a0)) / size,
                      test_flags=[[flags.pack(cell) for cell in row] for row in test],
                      single_task_flags=None if a0 is None else [flags.pack(cell) for cell in a0])


@pytest.mark.parametrize(("correct", "n"), [(0, 10), (3, 10), (7, 32), (32, 32), (1, 1)])
def test_wilson_is_its_closed_formula(correct, n):
    p = correct / n
    centre = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z / (1 + Z**2 / n) * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2))
    found = uncertainty.wilson(correct, n)
    assert found.low == pytest.approx(max(0.0, centre - half), abs=1e-12)
    assert found.high == pytest.approx(min(1.0, centre + half), abs=1e-12)


def test_flags_that_fix_the_answer_give_a_point_interval():
    right, wrong = [True] * 5, [False] * 5
    intervals = uncertainty.run_intervals(run([[right], [right, right]]))
    assert intervals.metrics == {"oa": Interval(100.0, 100.0), "la": Interval(100.0, 100.0), "bwt": Interval(0.0, 0.0)}
    # every example forgotten: a[1][0] = 0 after a[0][0] = 1, whatever the resample
    assert uncertainty.run_intervals(run([[right], [wrong, right]])).metrics == {
        "oa": Interval(50.0, 50.0), "la": Interval(100.0, 100.0), "bwt": Interval(-100.0, -100.0)}
    # FWT against an a0 that is all wrong where a[j][j] is all right
    assert uncertainty.run_intervals(run([[right], [right, right]], a0=[wrong, wrong])).metrics["fwt"] == \
        Interval(100.0, 100.0)


def test_bwt_resamples_a_tasks_examples_together_in_every_cell():
    """2 tasks of 3 examples. Task 1 is right on examples 0 and 1 after its training, on example 0 only after task 2:
    BWT = −100 · (how often example 1 is drawn) / 3. With one draw of indices for both cells, every resample's BWT is
    of that form; enumerating the 27 equally likely draws gives its exact distribution, which the bootstrap's
    frequencies and percentile interval match. Unpaired draws would give other values (e.g. +33.3)."""
    before, after = [True, True, False], [True, False, False]
    results = run([[before], [after, [True, False, True]]])
    exact = Counter()
    for draw in itertools.product(range(3), repeat=3):
        exact[round(100 * sum(after[i] - before[i] for i in draw) / 3, 9)] += 1 / 27
    assert exact == pytest.approx({0.0: 8 / 27, -33.333333333: 12 / 27, -66.666666667: 6 / 27, -100.0: 1 / 27})
    kept = uncertainty.RunFlags.of(results)
    values = uncertainty.bootstrap([kept])[0]["bwt"]
    found = Counter(round(float(v), 9) for v in values)
    assert set(found) <= set(exact)  # only the paired values
    assert {k: found[k] / len(values) for k in exact} == pytest.approx(exact, abs=0.04)
    # the exact 2.5 % and 97.5 % quantiles of the enumerated distribution: −100 (1/27 > 2.5 %) and 0
    assert uncertainty.run_intervals(results).metrics["bwt"] == Interval(-100.0, 0.0)
    # one cell forgotten exactly as it was learnt: paired, BWT is 0 in every resample (unpaired it would vary)
    assert uncertainty.run_intervals(run([[before], [before, after]])).metrics["bwt"] == Interval(0.0, 0.0)


def test_the_same_flags_and_seed_give_the_same_interval_and_another_seed_another():
    rng = np.random.default_rng(5)
    results = run([[list(rng.random(40) < 0.6)], [list(rng.random(40) < 0.5), list(rng.random(40) < 0.7)]])
    first, again = uncertainty.run_intervals(results), uncertainty.run_intervals(results)
    assert first == again
    kept = uncertainty.RunFlags.of(results)
    again, other = (uncertainty.bootstrap([kept], seed=seed)[0]["oa"] for seed in (0, 1))
    assert not np.array_equal(again, other) and abs(np.std(again) - np.std(other)) < 0.1 * np.std(again)


def test_cells_get_their_wilson_interval_and_the_diagonal_none_beyond():
    intervals = uncertainty.run_intervals(run([[[True, False]], [[True, True], [False, False]]]))
    assert intervals.cells["accuracy_matrix"] == [[uncertainty.wilson(1, 2), None],
                                                  [uncertainty.wilson(2, 2), uncertainty.wilson(0, 2)]]
    assert uncertainty.RunIntervals.from_json(intervals.to_json()) == intervals


def test_a_run_without_flags_has_no_intervals():
    old = RunResults(order=1, tasks=["a"], method="m", seed=1, oa=50.0, bwt=0.0, accuracy_matrix=[[0.5]])
    assert uncertainty.run_intervals(old) is None and uncertainty.intervals_of(old) is None
    assert uncertainty.RunFlags.of(old) is None


def flags_of(*runs: RunResults) -> list[uncertainty.RunFlags]:
    return [uncertainty.RunFlags.of(results) for results in runs]


HALF, RIGHT, WRONG = [True, False] * 3, [True] * 6, [False] * 6
# OA of [[HALF], [HALF, HALF]] against [[HALF], [RIGHT, RIGHT]]: each example's share of the difference is
# 100 / 2 · (other − reference), 0 or 50 in each task, population variance 625, so the bootstrap's variance of the
# difference is 2 · 625 / 6 (`stratified_variance`: Σ_tasks var / n)
ONE_RUN_SE = math.sqrt(2 * 625 / 6)


def test_one_run_a_side_is_an_interval_over_its_test_examples_and_says_so():
    reference, better = flags_of(run([[HALF], [HALF, HALF]]), run([[HALF], [RIGHT, RIGHT]]))
    found = uncertainty.compare([reference], [better], "oa")
    assert (found.difference, found.se, found.dof, found.seeds, found.runs) == (50.0, pytest.approx(ONE_RUN_SE), None,
                                                                                 1, 1)
    assert found.interval == Interval(pytest.approx(50 - Z * ONE_RUN_SE), pytest.approx(50 + Z * ONE_RUN_SE))
    assert found.real and found.improvement is None  # rliable's needs two runs a side
    assert found.verdict == "a difference on these test examples, for this one training run"
    assert found.sentence("B", "A") == ("B's OA is +50.00 points against A's (95 % interval [21.71, 78.29] over the "
                                        "test examples of one training run): a difference on these test examples, "
                                        "for this one training run (higher).")
    same = uncertainty.compare([reference], [reference], "bwt")
    assert (same.difference, same.interval, same.real) == (0.0, Interval(0.0, 0.0), False)
    assert same.sentence("B", "A") == ("B's BWT is +0.00 points against A's (95 % interval [0.00, 0.00] over the test "
                                       "examples of one training run): within noise at this size on these test "
                                       "examples, for this one training run.")
    # one example of six apart in task 2: shares 50 · [0, 1, −1, 1, 0, 0], population variance 1250 − (25/3)²
    [one] = flags_of(run([[HALF], [HALF, [True, True, False, True, True, False]]]))
    close = uncertainty.compare([reference], [one], "oa")
    assert close.difference == pytest.approx(100 * (4 / 6 - 3 / 6) / 2)
    assert close.se == pytest.approx(math.sqrt((1250 - (25 / 3) ** 2) / 6)) and not close.real
    [worse] = flags_of(run([[WRONG], [WRONG, WRONG]]))
    assert uncertainty.compare([reference], [worse], "oa").sentence("B", "A").endswith("run (lower).")
    assert uncertainty.compare([reference], [worse], "fwt") is None  # no a0 flags
    with pytest.raises(ValueError, match="same test examples"):
        uncertainty.compare([reference], flags_of(run([[HALF], [HALF, HALF]], fingerprint="other")), "oa")


def test_the_learning_accuracy_is_resampled_as_the_diagonal_and_a_trade_off_is_named():
    """The reference forgets task 1 to half and learns task 2 (diagonal [100, 100]); the other forgets nothing but
    learns task 2 to half (diagonal [100, 50]). LA: only task 2's diagonal differs, shares 100 / 2 · (half − right) =
    0 or −50 (population variance 625): SE = √(625 / 6). BWT +50 with LA −25: a trade-off, and the sentence says so."""
    reference, other = flags_of(run([[RIGHT], [HALF, RIGHT]], tasks=["a", "b"]),
                                run([[RIGHT], [RIGHT, HALF]], tasks=["a", "b"]))
    assert reference.point()["la"] == 100.0 and other.point()["la"] == 75.0  # the diagonals [100, 100], [100, 50]
    learning = uncertainty.compare([reference], [other], "la")
    assert (learning.difference, learning.se) == (-25.0, pytest.approx(math.sqrt(625 / 6)))
    assert learning.real and uncertainty.METRIC_NAMES["la"] == "learning accuracy"
    forgetting = uncertainty.compare([reference], [other], "bwt")
    assert forgetting.difference == 50.0 and forgetting.real
    assert uncertainty.trade_off([reference], [other], forgetting, learning, "B", "A") == (
        "B forgets less than A (BWT +50.00 points), but learned task 2 (b) less (its accuracy right after learning it "
        "50.0 against 100.0 %; learning accuracy -25.00 points, a difference on these test examples, for this one "
        "training run): a trade-off, not a gain.")
    # no trade-off: the same learning accuracy, or more forgetting, or no comparison
    assert uncertainty.trade_off([reference], [reference], uncertainty.compare([reference], [reference], "bwt"),
                                 uncertainty.compare([reference], [reference], "la"), "B", "A") is None
    assert uncertainty.trade_off([other], [reference], uncertainty.compare([other], [reference], "bwt"),
                                 uncertainty.compare([other], [reference], "la"), "B", "A") is None
    assert uncertainty.trade_off([reference], [other], None, learning, "B", "A") is None
    interval = uncertainty.run_intervals(run([[RIGHT], [HALF, HALF]])).metrics["la"]  # (100 + 100 · k / 6) / 2
    assert interval.low >= 50.0 and interval.high <= 100.0 and interval.low <= 75.0 <= interval.high


def test_seeds_that_scored_the_same_examples_alike_give_the_one_level_interval():
    """Two seeds, every run the same flags on the same test examples (the same digests): no spread between seeds, so
    the interval is the test examples' alone, the one run's, and the product's bootstrap of the two pairs agrees (its
    standard deviation within its Monte-Carlo error)."""
    digests = ["x", "y"]
    pairs = [flags_of(run([[HALF], [HALF, HALF]], digests=digests), run([[HALF], [RIGHT, RIGHT]], digests=digests))
             for _ in range(2)]
    found = uncertainty.compare([a for a, _ in pairs], [b for _, b in pairs], "oa")
    assert (found.difference, found.se, found.dof, found.seeds) == (50.0, pytest.approx(ONE_RUN_SE), None, 2)
    assert found.interval == Interval(pytest.approx(50 - Z * ONE_RUN_SE), pytest.approx(50 + Z * ONE_RUN_SE))
    assert found.verdict == "a difference over 2 seeds"
    resampled = uncertainty.bootstrap([run for pair in pairs for run in pair])
    one_level = np.mean([resampled[2 * k + 1]["oa"] - resampled[2 * k]["oa"] for k in range(2)], axis=0)
    assert np.std(one_level) == pytest.approx(ONE_RUN_SE, rel=0.05)
    # the same flags on each seed's own examples: still no spread, and the one-level interval of the mean of two
    # independent runs (variance W / 2), not one of no width
    pairs = [flags_of(run([[HALF], [HALF, HALF]], fingerprint=s), run([[HALF], [RIGHT, RIGHT]], fingerprint=s))
             for s in ("seed1", "seed2")]
    own = uncertainty.compare([a for a, _ in pairs], [b for _, b in pairs], "oa")
    assert (own.se, own.dof) == (pytest.approx(ONE_RUN_SE / math.sqrt(2)), None)
    resampled = uncertainty.bootstrap([run for pair in pairs for run in pair])
    one_level = np.mean([resampled[2 * k + 1]["oa"] - resampled[2 * k]["oa"] for k in range(2)], axis=0)
    assert np.std(one_level) == pytest.approx(own.se, rel=0.05)


def test_seeds_that_differ_by_known_constants_give_the_t_interval_over_seeds():
    """Three seeds on their own examples, every difference exact in its examples (no test-example noise): OA +100,
    0, +50. SE = sample std / √3 = 50 / √3, t with 2 degrees of freedom (4.302653): the interval holds the spread."""
    seeds = [f"seed{s}" for s in range(3)]
    reference = flags_of(*(run([[WRONG], [WRONG, WRONG]], fingerprint=s) for s in seeds))
    other = flags_of(run([[RIGHT], [RIGHT, RIGHT]], fingerprint=seeds[0]),
                     run([[WRONG], [WRONG, WRONG]], fingerprint=seeds[1]),
                     run([[RIGHT], [RIGHT, WRONG]], fingerprint=seeds[2]))
    found = uncertainty.compare(reference, other, "oa")
    assert (found.difference, found.se, found.dof) == (50.0, pytest.approx(50 / math.sqrt(3)), pytest.approx(2))
    half = 4.302652729749462 * 50 / math.sqrt(3)
    assert found.interval == Interval(pytest.approx(50 - half), pytest.approx(50 + half))
    assert found.interval.low < 0 < 100 < found.interval.high and not found.real
    # rliable's P(X > Y) over the 3 × 3 pairs of seeds' OA: (100, 0, 50) against (0, 0, 0): 3 + 3 · ½ + 3 of 9
    assert found.improvement.value == pytest.approx(7.5 / 9)
    assert found.sentence("B", "A") == (
        f"B's OA is +50.00 points against A's (95 % interval [{50 - half:.2f}, {50 + half:.2f}] over 3 seeds and "
        "their test examples, probability of improvement 0.83 "
        f"{found.improvement.interval.text(digits=2)}): within noise at this size over 3 seeds.")


def test_the_test_examples_seeds_share_add_what_their_spread_cannot_show():
    """Seed 1: reference HALF, other RIGHT (shares s = 50 · [0, 1, 0, 1, 0, 1] a task, OA +50); seed 2: reference
    RIGHT, other its complement (shares s − 50, OA −50). S² = 5000, so S² / 2 = 2500. On their own examples the seeds'
    noise is in S² already: SE² = 2500, 1 degree of freedom. On the same examples (one digest) their shares move
    together: W = W_s = 2 · 625 / 6, C = (4 W − 2 W) / 2 = W, SE² = 2500 + W, ν = SE⁴ / 2500²."""
    flip = [False, True] * 3
    cases = {}
    for case, digests in (("own", [None, None]), ("shared", [["x", "y"], ["x", "y"]])):
        reference = flags_of(run([[HALF], [HALF, HALF]], fingerprint="s1", digests=digests[0]),
                             run([[RIGHT], [RIGHT, RIGHT]], fingerprint="s2", digests=digests[1]))
        other = flags_of(run([[HALF], [RIGHT, RIGHT]], fingerprint="s1", digests=digests[0]),
                         run([[RIGHT], [flip, flip]], fingerprint="s2", digests=digests[1]))
        cases[case] = uncertainty.compare(reference, other, "oa")
    w = 2 * 625 / 6
    assert (cases["own"].difference, cases["own"].se, cases["own"].dof) == (0.0, pytest.approx(50.0), pytest.approx(1))
    assert cases["own"].interval.high == pytest.approx(12.706204736174694 * 50)
    assert (cases["shared"].se, cases["shared"].dof) == (pytest.approx(math.sqrt(2500 + w)),
                                                         pytest.approx((2500 + w) ** 2 / 2500 ** 2))


def test_orders_of_one_seed_share_each_tasks_draws_whatever_their_order_or_caps():
    """Two orders of the same two tasks, one seed: the same test examples of each task, so their draws are shared
    (`bootstrap`: the same resampled OA) and their average is no surer than one order (`compare`: the one run's SE,
    not that SE / √2 of two orders on other examples). Likewise runs of other training caps (another data
    fingerprint) with the same test digests; runs written before the digests share by data fingerprint and seed."""
    for fingerprints, digests in ((("data", "data"), None), (("cap1", "cap2"), {"t0": "x", "t1": "y"})):
        forward, backward = ([run(cells, fingerprint=fingerprint, tasks=tasks,
                                  digests=None if digests is None else [digests[t] for t in tasks])
                              for cells in ([[HALF], [HALF, HALF]], [[HALF], [RIGHT, RIGHT]])]
                             for tasks, fingerprint in zip((["t0", "t1"], ["t1", "t0"]), fingerprints, strict=True))
        resampled = uncertainty.bootstrap(flags_of(forward[0], backward[0]))
        assert np.array_equal(resampled[0]["oa"], resampled[1]["oa"])
        found = uncertainty.compare(flags_of(forward[0], backward[0]), flags_of(forward[1], backward[1]), "oa",
                                    seeds=[1, 1])
        assert (found.difference, found.se, found.seeds, found.runs) == (50.0, pytest.approx(ONE_RUN_SE), 1, 2)
        assert found.verdict == "a difference on these test examples, for these 2 training runs of one seed"


def flags_of_cells(cells: list[list[list[bool]]], factors=None) -> uncertainty.RunFlags:
    """A run's flags straight from its cells (a task may have no example)."""
    test = [[np.asarray(cell, dtype=bool) for cell in row] for row in cells]
    key = tuple((("data", 1), f"task{j}", cell.size) for j, cell in enumerate(test[-1]))
    return uncertainty.RunFlags(key=key, test=test, a0=None, a0_shared=None, joint=False,
                                factors=factors or (1.0,) * len(key))


@pytest.mark.parametrize(("cells", "factors", "reason"), [
    ([[[True]], [[True], [True, False]]], None, "task task0 has 1 test example"),
    ([[[True, False]], [[True, False], []]], None, "task task1 has 0 test examples"),
    ([[[True, False]], [[True, False], [True, True]]], (math.nan, 1.0), "a metric is not a number"),
])
def test_no_verdict_from_nothing(cells, factors, reason):
    reference = flags_of_cells(cells, factors)
    found = uncertainty.compare([reference], [flags_of_cells(cells, factors)], "oa")
    assert (found.interval, found.real, found.verdict) == (None, False, f"no verdict: {reason}")
    assert found.sentence("B", "A") == f"B's OA against A's: no verdict: {reason}."
    assert found.to_json()["interval"] is None
    assert uncertainty.in_family([found, None])[0].family == 1  # counted in no family


def test_a_run_with_an_empty_task_has_no_metric_interval():
    results = RunResults(order=1, tasks=["a", "b"], method="m", seed=1, oa=50.0, bwt=0.0,
                         accuracy_matrix=[[1.0, None], [1.0, 0.0]],
                         test_flags=[[flags.pack([True])], [flags.pack([True]), flags.pack([])]])
    intervals = uncertainty.run_intervals(results)
    assert intervals.metrics == {"bwt": Interval(0.0, 0.0)}  # OA reads the empty task: none
    assert intervals.cells["accuracy_matrix"][1] == [uncertainty.wilson(1, 1), None]


def test_a_table_of_k_comparisons_holds_them_together():
    """Bonferroni: four comparisons, each at 1 − 0.05 / 4 = 98.75 %, the normal's quantile 2.497705 for one run."""
    reference, better = flags_of(run([[HALF], [HALF, HALF]]), run([[HALF], [RIGHT, RIGHT]]))
    one = uncertainty.compare([reference], [better], "oa")
    refused = uncertainty.compare([flags_of_cells([[[True]], [[True], [True]]])],
                                  [flags_of_cells([[[True]], [[True], [True]]])], "oa")
    family = uncertainty.in_family([one, one, None, refused, one, one])
    assert [c and c.family for c in family] == [4, 4, None, 4, 4, 4]
    assert family[0].confidence == pytest.approx(0.9875)
    assert family[0].interval.high - 50 == pytest.approx(2.4977054744145220 * ONE_RUN_SE)
    assert family[0].sentence("B", "A").startswith("B's OA is +50.00 points against A's (98.75 % interval [")
    assert uncertainty.family_text(4) == ("4 comparisons, each interval at 98.75 % (Bonferroni) so that all 4 hold "
                                          "together at 95 %: a difference in any of them is one at 95 %")


def test_probability_of_improvement_is_rliables_mann_whitney():
    """P(X > Y) over every pair of runs, ties half: X = (3, 1), Y = (2, 1): 1 + 1 + 0 + ½ of 4."""
    found = uncertainty.probability_of_improvement([3.0, 1.0], [2.0, 1.0])
    assert found.value == 0.625 and found.interval.low <= 0.625 <= found.interval.high
    assert uncertainty.probability_of_improvement([5.0, 6.0], [1.0, 2.0]) == \
        uncertainty.Improvement(1.0, Interval(1.0, 1.0))


def test_authors_factors_scale_every_resampled_cell():
    right = [True] * 4
    scaled = uncertainty.RunFlags.of(run([[right], [right, right]]), factors=[0.5, 1.0])
    assert scaled.point() == {"oa": 75.0, "la": 75.0, "bwt": 0.0}  # task 1 halved in both its cells
    assert uncertainty.percentile_interval(uncertainty.bootstrap([scaled])[0]["oa"]) == Interval(75.0, 75.0)


def test_dev_mean_and_paired_se_by_hand():
    """Two tasks. Best: task 1 [1,1,1,0], task 2 [1,0]; other: [1,0,1,0], [1,0]. Differences per example: task 1
    [0,−1,0,0] (mean −1/4, sample variance 1/4), task 2 [0,0] (variance 0): SE = sqrt(1/4 / 4 + 0 / 2) / 2 = 1/8."""
    best = [[True, True, True, False], [True, False]]
    other = [[True, False, True, False], [True, False]]
    found = uncertainty.dev_mean_and_se([best, [flags.pack(cell) for cell in other]], best=0)
    assert found == [uncertainty.DevMean(math.fsum([3 / 4, 1 / 2]) / 2, 0.0),
                     uncertainty.DevMean(math.fsum([2 / 4, 1 / 2]) / 2, pytest.approx(1 / 8))]
    with pytest.raises(ValueError, match="same examples"):
        uncertainty.dev_mean_and_se([best, [[True], [True, False]]], best=0)
    with pytest.raises(JumpLoRAError, match="^the dev split of task 2 of the stage holds no example: a λ cannot"):
        uncertainty.dev_mean_and_se([[[True], []], [[True], []]], best=0)
