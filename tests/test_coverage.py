"""`bench/coverage.py`'s simulation, small: equal methods with the seeds' own noise (between-seed SD of OA 2 points)
through `uncertainty.compare` must say "a difference" in at most 10 % of trials from two seeds on (nominal 5 %: the
rest is Monte-Carlo error at 200 trials, SE 1.5 %); one seed, whose interval is over its test examples alone, says it
far more often (what its one-run wording is for), and a true 5-point difference is found."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "coverage.py"
spec = importlib.util.spec_from_file_location("coverage_bench", SCRIPT)
coverage = importlib.util.module_from_spec(spec)
spec.loader.exec_module(coverage)


@pytest.mark.parametrize("seeds", [2, 3])
def test_equal_methods_with_seed_noise_are_rarely_called_different(seeds):
    assert coverage.simulate(sd=2.0, seeds=seeds, size=100, difference=0.0, trials=200) <= 0.10


def test_one_seed_is_sure_only_of_its_test_examples_and_a_real_difference_is_found():
    assert coverage.simulate(sd=2.0, seeds=1, size=500, difference=0.0, trials=100) >= 0.25
    assert coverage.simulate(sd=0.0, seeds=3, size=500, difference=5.0, trials=100) >= 0.8
