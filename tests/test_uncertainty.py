"""The intervals of `jumplora.uncertainty` on small made-up flag sets, each against a value worked out by hand or an
independent computation: Wilson against its closed formula, bootstrap intervals whose answer the flags fix, BWT's
paired resampling against an enumeration of every resample, a comparison's verdict, a λ's paired standard error."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from jumplora import flags, uncertainty
from jumplora.results import RunResults
from jumplora.uncertainty import Interval

Z = 1.959963984540054  # the standard normal's 97.5 % quantile


def run(test: list[list[list[bool]]], a0: list[list[bool]] | None = None, fingerprint: str = "data") -> RunResults:
    """A run whose test cells hold these flags (row i: tasks j ≤ i); its accuracies, OA and BWT from them by hand."""
    size = len(test)
    a = [[sum(cell) / len(cell) for cell in row] + [None] * (size - len(row)) for row in test]
    oa = 100 * sum(a[-1]) / size
    bwt = 100 * sum(a[-1][j] - a[j][j] for j in range(size - 1)) / (size - 1) if size > 1 else 0.0
    return RunResults(order=1, tasks=[f"task{j}" for j in range(size)], method="m", seed=1, oa=oa, bwt=bwt,
                      accuracy_matrix=a, data_fingerprint=fingerprint,
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
    assert intervals.metrics == {"oa": Interval(100.0, 100.0), "bwt": Interval(0.0, 0.0)}
    # every example forgotten: a[1][0] = 0 after a[0][0] = 1, whatever the resample
    assert uncertainty.run_intervals(run([[right], [wrong, right]])).metrics == {"oa": Interval(50.0, 50.0),
                                                                                "bwt": Interval(-100.0, -100.0)}
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
    other = uncertainty.percentile_interval(uncertainty.bootstrap([kept], seed=1)[0]["oa"])
    assert other != first.metrics["oa"] and abs(other.low - first.metrics["oa"].low) < 3


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


def test_a_comparison_says_whether_the_difference_is_real():
    right, wrong, half = [True] * 6, [False] * 6, [True, False] * 3
    reference, better = flags_of(run([[half], [half, half]]), run([[half], [right, right]]))
    found = uncertainty.compare([reference], [better], "oa")
    # OA 50 → 100: a resample ties only where it draws right examples alone in both tasks' half-right cells
    assert found.difference == 50.0 and found.interval.low > 0 and found.real and found.verdict == "a difference"
    assert 0.99 < found.improvement <= 1.0
    assert found.sentence("B", "A").endswith("a difference, higher beyond the noise.")
    same = uncertainty.compare([reference], [reference], "bwt")
    assert (same.difference, same.interval, same.improvement, same.real) == (0.0, Interval(0.0, 0.0), 0.5, False)
    assert same.sentence("B", "A") == ("B's BWT is +0.00 points against A's (95 % interval [0.00, 0.00], probability "
                                       "of improvement 0.50): within noise at this size.")
    # one example of six apart: within noise
    [one] = flags_of(run([[half], [half, [True, True, False, True, True, False]]]))
    close = uncertainty.compare([reference], [one], "oa")
    assert close.interval.holds(0.0) and not close.real and 0.5 < close.improvement < 1
    assert close.difference == pytest.approx(100 * (4 / 6 - 3 / 6) / 2)
    [worse] = flags_of(run([[wrong], [wrong, wrong]]))
    assert uncertainty.compare([reference], [worse], "oa").improvement == 0.0
    assert uncertainty.compare([reference], [worse], "fwt") is None  # no a0 flags
    with pytest.raises(ValueError, match="same test examples"):
        uncertainty.compare([reference], flags_of(run([[half], [half, half]], fingerprint="other")), "oa")


def test_the_comparison_over_seeds_pairs_each_seed_and_averages():
    half, right = [True, False] * 3, [True] * 6
    refs = flags_of(*(run([[half], [half, half]], fingerprint=f"seed{s}") for s in (1, 2)))
    others = flags_of(run([[half], [right, right]], fingerprint="seed1"),
                      run([[half], [half, half]], fingerprint="seed2"))
    found = uncertainty.compare(refs, others, "oa")
    assert found.difference == 25.0  # (50 + 0) / 2
    alone = uncertainty.compare(refs[:1], others[:1], "oa")
    assert found.interval.low >= alone.interval.low / 2 - 1e-9 and found.interval.high <= alone.interval.high / 2


def test_authors_factors_scale_every_resampled_cell():
    right = [True] * 4
    scaled = uncertainty.RunFlags.of(run([[right], [right, right]]), factors=[0.5, 1.0])
    assert scaled.point() == {"oa": 75.0, "bwt": 0.0}  # task 1 halved in both its cells
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
