"""How often does a comparison say "a difference"? Measured through the product's own comparison code
(`jumplora.uncertainty.compare`) on simulated runs whose truth is known.

    python bench/coverage.py            # 2000 trials a case (about 5 minutes on one core)
    python bench/coverage.py --quick    # 300 trials a case (under a minute)

Each trial makes two methods' runs of one order of 4 tasks, one run per seed for each method (the pair of a seed on
the same test examples, as the report pairs them), and compares their OA. A run's accuracy on task j is
base_j + the method's effect + its training's own effect, N(0, SD²) in OA points, one draw per run and seed (the
noise of the seed: what a rerun with another seed changes); each test example's right / wrong flag is drawn at that
accuracy, correlated between the two methods on the same example (a Gaussian copula, correlation `CORRELATION`: an
example hard for one method is hard for the other, as real test sets are). Cases: the between-seed SD of OA (0, 1, 2
points) × seeds (1, 3, 5) × test examples a task (100, 500), for equal methods (how often the verdict says "a
difference": false, nominally at most 5 % where there are 2 seeds or more) and for methods 5 points apart (how often
it finds that difference). With one seed the interval is over the test examples of that one training run alone: its
false rate grows with the seed's noise, and its wording says so (`uncertainty.basis_text`). The last line states the
worst false rate over the cases of 2 seeds or more.

`simulate` is what the fast test tier runs (`tests/test_coverage.py`), small. Not part of `make test`."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jumplora import tables, uncertainty  # noqa: E402

SDS = (0.0, 1.0, 2.0)  # between-seed SD of OA, points
SEEDS = (1, 3, 5)
SIZES = (100, 500)  # test examples a task
BASE = (0.85, 0.70, 0.60, 0.75)  # each task's accuracy (4 tasks)
TRUE_DIFFERENCE = 5.0  # OA points between unequal methods
CORRELATION = 0.5  # of the latent scores of the two methods on one example
TRIALS, QUICK_TRIALS = 2000, 300
NOMINAL = 1 - uncertainty.CONFIDENCE


def cutoff(accuracy: np.ndarray) -> np.ndarray:
    """The latent score below which an example is right, for a standard normal score: Φ⁻¹(accuracy)."""
    from scipy import special

    return special.ndtri(np.clip(accuracy, 0.01, 0.99))


def run_flags(right: list[np.ndarray], seed: int) -> uncertainty.RunFlags:
    """A continual run of len(right) tasks whose every row scores these flags (OA reads the last row), keyed by its
    seed's test examples: the two methods' runs of a seed share them."""
    key = tuple(((f"seed{seed}",), f"task{j}", cell.size) for j, cell in enumerate(right))
    test = [right[:i + 1] for i in range(len(right))]
    return uncertainty.RunFlags(key=key, test=test, a0=None, a0_shared=None, joint=False,
                                factors=(1.0,) * len(right))


def trial(rng: np.random.Generator, sd: float, seeds: int, size: int, difference: float) -> uncertainty.Comparison:
    """One comparison of a reference and a method `difference` OA points better, `seeds` seeds each."""
    runs: tuple[list, list] = ([], [])
    base = np.asarray(BASE)
    for seed in range(seeds):
        shared = rng.standard_normal((len(BASE), size))  # each example's difficulty, the same for both methods
        for side, shift in enumerate((0.0, difference)):
            accuracy = base + (shift + sd * rng.standard_normal()) / 100
            score = math.sqrt(CORRELATION) * shared + math.sqrt(1 - CORRELATION) * rng.standard_normal(shared.shape)
            right = score < cutoff(accuracy)[:, None]
            runs[side].append(run_flags(list(right), seed))
    return uncertainty.compare(runs[0], runs[1], "oa")


def simulate(sd: float, seeds: int, size: int, difference: float, trials: int, seed: int = 0) -> float:
    """The share of `trials` in which the comparison says "a difference" (`Comparison.real`)."""
    rng = np.random.default_rng([seed, int(10 * sd), seeds, size, int(10 * difference)])
    return sum(trial(rng, sd, seeds, size, difference).real for _ in range(trials)) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TRIALS} trials a case instead of {TRIALS}")
    trials = QUICK_TRIALS if parser.parse_args().quick else TRIALS
    started = time.perf_counter()
    rows, worst = [], (0.0, None)
    for sd in SDS:
        for seeds in SEEDS:
            for size in SIZES:
                false = simulate(sd, seeds, size, 0.0, trials)
                found = simulate(sd, seeds, size, TRUE_DIFFERENCE, trials)
                if seeds >= 2 and false >= worst[0]:
                    worst = (false, f"SD {sd:g}, {seeds} seeds, {size} examples a task")
                rows.append([f"{sd:g}", str(seeds), str(size), f"{false:.3f}", f"{found:.3f}",
                             uncertainty.basis_text(seeds, seeds)])
    error = math.sqrt(NOMINAL * (1 - NOMINAL) / trials)
    print(f"OA of two methods, 4 tasks, one run a seed a side, {trials} trials a case (Monte-Carlo SE at 5 %: "
          f"{error:.3f}); 'a difference' when the 95 % interval of `uncertainty.compare` leaves out 0")
    print(tables.markdown(["between-seed SD of OA", "seeds", "test examples a task", "says 'a difference', equal",
                           f"finds a true {TRUE_DIFFERENCE:g}-point difference", "the verdict rests on"], rows))
    print(f"{time.perf_counter() - started:.0f} s")
    print(f"worst false rate over the cases of 2 seeds or more: {worst[0]:.3f} ({worst[1]}; nominal {NOMINAL:.2f}, "
          f"Monte-Carlo SE {error:.3f})")


if __name__ == "__main__":
    main()
