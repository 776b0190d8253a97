"""How sure a run's numbers are, from the per-example flags it keeps (`jumplora.flags`; results.json's `test_flags`,
`dev_flags`, `single_task_flags`, `single_task_flags_shared`; a `TaskRecord`'s `test_flags` / `dev_flags`).

- an accuracy cell: a 95 % Wilson interval (`wilson`, scipy.stats.binomtest), a fraction like the cell;
- OA, BWT, FWT and FWT last row: a 95 % percentile bootstrap over the test examples (`run_intervals`, `bootstrap`),
  in percent like the metrics: stratified by task (each task's examples are resampled within the task, as many as it
  has), and paired (one draw of example indices per task, used for every cell of that task's column, its a0s
  included, so the pairs a[T][j] − a[j][j] of BWT and a[j][j] − a0[j] of FWT are kept); `RESAMPLES` draws from
  numpy's generator seeded with `SEED`, so the same run prints the same interval;
- two runs (or two methods' runs, paired seed by seed) on the same test examples: `compare`, the paired bootstrap
  interval of the difference of a metric, the probability of improvement (over the bootstrap: P(Δ* > 0) + ½ P(Δ* =
  0), rliable's P(X > Y) + ½ P(X = Y) with the resampled difference as the draw) and a one-line verdict;
- several seeds (each seed draws its own data, so its own test examples): a mean over seeds (and orders) is
  resampled as the mean of its runs' resamples, each run on its own examples (`report.metric_tables`: within-seed);
  the between-seed spread is the sample std over seeds the tables show beside it (SPEC §4);
- a λ grid's stage: `dev_mean_and_se(cells_per_lambda, best)` → a `DevMean(mean, se)` per λ: its dev mean over the
  seen tasks (a fraction, equal to `TrialRecord.dev_mean`: the mean over tasks of each task's accuracy) and the
  standard error of its paired difference to λ number `best` (0 for `best` itself).

DECISIONS.md ("Intervals") says why these methods."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from jumplora import flags, metrics
from jumplora.results import RunResults

CONFIDENCE = 0.95
# bootstrap draws: between generator seeds an interval's ends move by about 0.1 point at 500 examples a task, 0.3 at
# 32 (where one example of 4 tasks × 32 moves OA by 0.8)
RESAMPLES = 2000
SEED = 0  # of the bootstrap's generator: the same flags give the same interval, byte for byte
METRICS = ("oa", "bwt", "fwt", "fwt_last_row")  # RunResults' names of the metrics with a bootstrap interval
CELL_METHOD = "Wilson score interval (scipy.stats.binomtest(...).proportion_ci(method='wilson'))"
METRIC_METHOD = (f"percentile bootstrap over the test examples, stratified by task and paired (one draw per task for "
                 f"every cell of its column and its a0), {RESAMPLES} resamples, numpy default_rng([{SEED}, digest of "
                 "the data and tasks])")
NO_FLAGS = "no intervals (written before flags were kept)"
# under a summary's numbers
NOTE = (f"[low, high]: 95 % intervals; cells Wilson, OA/BWT/FWT a bootstrap over the test examples (stratified by "
        f"task, paired, {RESAMPLES} resamples, seeded)")


@dataclass(frozen=True)
class Interval:
    """A two-sided interval at `CONFIDENCE`, in the unit of the number it belongs to."""

    low: float
    high: float

    def text(self, scale: float = 1.0, digits: int = 1) -> str:
        """`[low, high]` times `scale` (100 for a fraction shown in percent)."""
        return f"[{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"

    def to_json(self) -> list[float]:
        return [self.low, self.high]

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


def wilson(correct: int, n: int) -> Interval:
    """The Wilson score interval of `correct` right out of `n` (a fraction)."""
    from scipy import stats  # 1.5 s to import: loaded by what computes an interval, not by `jumplora --help`

    ci = stats.binomtest(int(correct), int(n)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return Interval(float(ci.low), float(ci.high))


def cell_interval(cell: np.ndarray) -> Interval:
    """`wilson` of one accuracy cell's flags."""
    return wilson(int(cell.sum()), cell.size)


def percentile_interval(values: np.ndarray) -> Interval:
    """The central `CONFIDENCE` interval of bootstrap values (the percentile method)."""
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high))


# ---------------------------------------------------------------- a run's flags and their bootstrap


@dataclass(frozen=True)
class RunFlags:
    """The test flags of one run, unpacked: `test[i][j]` of training i and task j ≤ i (a joint method: one row of
    every task), the a0 rows' (None: not kept), each task's `factors` (what its accuracies are multiplied by: the
    report's authors' scoring, `report.unlabelled_factors`; 1 otherwise) and `key`, which test examples they are (runs
    of one key were evaluated on the same examples, in the same order: their draws are shared)."""

    key: tuple
    test: list[list[np.ndarray]]
    a0: list[np.ndarray] | None
    a0_shared: list[np.ndarray] | None
    joint: bool
    factors: tuple[float, ...]

    @classmethod
    def of(cls, results: RunResults, factors: Sequence[float] | None = None, a0: Sequence[str] | None = None,
           a0_shared: Sequence[str] | None = None) -> RunFlags | None:
        """The flags of `results` (its a0 rows', or `a0` / `a0_shared` where given: a sweep's a0 runs); None when it
        was written before flags were kept."""
        if not results.test_flags:
            return None
        test = [[flags.unpack(cell) for cell in row] for row in results.test_flags]
        own, shared = (None if not rows else [flags.unpack(cell) for cell in rows]
                       for rows in (a0 or results.single_task_flags, a0_shared or results.single_task_flags_shared))
        sizes = tuple(cell.size for cell in test[-1])
        return cls(key=(results.data_fingerprint, tuple(results.tasks), sizes), test=test, a0=own, a0_shared=shared,
                   joint=results.joint, factors=tuple(factors or [1.0] * len(sizes)))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Each task's number of test examples (the last row has every task)."""
        return self.key[2]

    def column(self, j: int) -> list[np.ndarray]:
        """The cells of task j: its test cells (rows i ≥ j; a joint method's one row) and its a0s."""
        cells = [row[j] for row in self.test if len(row) > j]
        return cells + [row[j] for row in (self.a0, self.a0_shared) if row is not None]

    def point(self) -> dict[str, float]:
        """The metrics of the flags as they are (the run's own numbers, but under `--authors-compat` with a cap, where
        the flags hold a whole number of rows outside the options: `metrics.authors_wrong_rows`)."""
        return {name: float(value) for name, value in metrics_of(self, lambda cell, j: cell.mean()).items()}


def metrics_of(run: RunFlags, mean: Callable[[np.ndarray, int], np.ndarray | float]) -> dict[str, np.ndarray | float]:
    """The run's metrics (percent, the `METRICS` it has) with `mean(cell, j)` as the accuracy of each cell of task j
    (times the task's factor): the formulas of `jumplora.metrics`, on numbers or on arrays of resamples alike."""

    def accuracy(cell: np.ndarray, j: int):
        return mean(cell, j) * run.factors[j]

    size = len(run.sizes)
    if run.joint:
        return {"oa": metrics.joint_overall_accuracy([accuracy(cell, j) for j, cell in enumerate(run.test[0])])}
    a = [[accuracy(cell, j) for j, cell in enumerate(row)] + [None] * (size - len(row)) for row in run.test]
    values = {"oa": metrics.overall_accuracy(a), "bwt": metrics.backward_transfer(a)}
    if run.a0 is not None:
        values["fwt"] = metrics.forward_transfer(a, [accuracy(cell, j) for j, cell in enumerate(run.a0)])
    if run.a0_shared is not None:
        shared = [accuracy(cell, j) for j, cell in enumerate(run.a0_shared)]
        values["fwt_last_row"] = metrics.forward_transfer_last_row(a, shared)
    return values


def generator(key: tuple, seed: int) -> np.random.Generator:
    """The bootstrap's generator of the runs of `key`: seeded with `seed` and a digest of the key, so a run's draws do
    not depend on which other runs are resampled with it (its interval in a report is its results.json's)."""
    digest = hashlib.sha256(json.dumps(key).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def bootstrap(runs: Sequence[RunFlags], seed: int = SEED, resamples: int = RESAMPLES) -> list[dict[str, np.ndarray]]:
    """Each run's metrics on `resamples` bootstrap resamples (`metrics_of`): per key (`generator`), task after task,
    one (resamples × n) draw of the task's example indices, with which every cell of the task's column (`column`) of
    every run of that key is averaged, so the runs of a key are paired; a draw is dropped once its task is done."""
    means: dict[int, np.ndarray] = {}  # id of a cell → its accuracy on each resample
    for key in dict.fromkeys(run.key for run in runs):
        members, rng = [run for run in runs if run.key == key], generator(key, seed)
        for j, n in enumerate(key[2]):
            indices = rng.integers(0, n, size=(resamples, n))
            for cell in (cell for run in members for cell in run.column(j)):
                means[id(cell)] = cell[indices].mean(axis=1)
    return [{name: np.broadcast_to(np.asarray(value, dtype=float), (resamples,))
             for name, value in metrics_of(run, lambda cell, j: means[id(cell)]).items()} for run in runs]


@dataclass(frozen=True)
class RunIntervals:
    """What results.json's `intervals` holds: the Wilson interval of each accuracy cell (test and dev, fractions,
    None beyond the diagonal) and the bootstrap interval of each metric the run has (percent), with the methods."""

    cells: dict[str, list[list[Interval | None]]]  # "accuracy_matrix" / "dev_accuracy_matrix"
    metrics: dict[str, Interval]

    def to_json(self) -> dict:
        return {"confidence": CONFIDENCE, "cell_method": CELL_METHOD, "metric_method": METRIC_METHOD,
                **{name: interval.to_json() for name, interval in self.metrics.items()},
                **{name: [[None if c is None else c.to_json() for c in row] for row in rows]
                   for name, rows in self.cells.items()}}

    @classmethod
    def from_json(cls, data: dict) -> RunIntervals:
        cells = {name: [[None if c is None else Interval(*c) for c in row] for row in data[name]]
                 for name in CELL_KEYS if name in data}
        return cls(cells=cells, metrics={name: Interval(*data[name]) for name in METRICS if name in data})


CELL_KEYS = {"accuracy_matrix": "test_flags", "dev_accuracy_matrix": "dev_flags"}


def run_intervals(results: RunResults) -> RunIntervals | None:
    """The intervals of a run from its flags; None when it kept none."""
    run = RunFlags.of(results)
    if run is None:
        return None
    size = len(results.tasks)
    cells = {name: [[cell_interval(flags.unpack(c)) for c in row] + [None] * (size - len(row))
                    for row in getattr(results, key)] for name, key in CELL_KEYS.items() if getattr(results, key)}
    values = bootstrap([run])[0]
    return RunIntervals(cells=cells, metrics={name: percentile_interval(v) for name, v in values.items()})


def intervals_of(results: RunResults) -> RunIntervals | None:
    """The intervals results.json holds; None for a run written before flags were kept."""
    return None if results.intervals is None else RunIntervals.from_json(results.intervals)


# ---------------------------------------------------------------- several seeds, and comparisons


@dataclass(frozen=True)
class Comparison:
    """`other` − `reference` of one metric (percent points; a mean over paired seeds, from the flags: `point`), its
    paired bootstrap interval and the probability of improvement (over the bootstrap: P(Δ* > 0) + ½ P(Δ* = 0))."""

    metric: str
    difference: float
    interval: Interval
    improvement: float

    @property
    def real(self) -> bool:
        """Whether the interval leaves 0 out: a difference the data show at this size."""
        return not self.interval.holds(0.0)

    @property
    def verdict(self) -> str:
        return "a difference" if self.real else "within noise at this size"

    def sentence(self, other: str, reference: str) -> str:
        """One plain sentence."""
        name = METRIC_NAMES[self.metric]
        what = (f"{other}'s {name} is {self.difference:+.2f} points against {reference}'s "
                f"(95 % interval {self.interval.text(digits=2)}, probability of improvement {self.improvement:.2f})")
        if self.real:
            return f"{what}: a difference, {'higher' if self.difference > 0 else 'lower'} beyond the noise."
        return f"{what}: within noise at this size."


METRIC_NAMES = {"oa": "OA", "bwt": "BWT", "fwt": "FWT", "fwt_last_row": "FWT last row"}


def compare(reference: Sequence[RunFlags], other: Sequence[RunFlags], metric: str) -> Comparison | None:
    """`other` against `reference` on `metric`: runs paired in order (one per seed; each pair on the same test
    examples, `RunFlags.key`: else ValueError), the mean of the pairs' differences and its bootstrap interval (the two
    runs of a pair resampled together); None when a run lacks the metric."""
    if len(reference) != len(other) or not reference:
        raise ValueError(f"compare needs as many runs on each side, got {len(reference)} and {len(other)}")
    for a, b in zip(reference, other, strict=True):
        if a.key != b.key:
            raise ValueError("the runs compared were not evaluated on the same test examples (data, tasks or caps "
                             "differ)")
    values = [run.get(metric) for run in bootstrap([*reference, *other])]
    if any(v is None for v in values):
        return None
    pairs = len(reference)
    delta = np.mean([values[pairs + k] - values[k] for k in range(pairs)], axis=0)
    points = [run.point()[metric] for run in (*reference, *other)]
    difference = math.fsum(points[pairs + k] - points[k] for k in range(pairs)) / pairs
    improvement = float(np.mean(delta > 0) + 0.5 * np.mean(delta == 0))
    return Comparison(metric, difference, percentile_interval(delta), improvement)


# ---------------------------------------------------------------- a λ grid's dev means


@dataclass(frozen=True)
class DevMean:
    """One λ's dev mean over the seen tasks (a fraction) and the standard error of its difference to the best λ's
    (paired by example, stratified by task; 0 for the best itself)."""

    mean: float
    se: float


def dev_mean_and_se(cells_per_lambda: Sequence[Sequence[str | np.ndarray]], best: int) -> list[DevMean]:
    """For each λ (its dev cells of tasks 1..t, packed or unpacked, in task order; every λ on the same examples): its
    dev mean, math.fsum of the tasks' accuracies / t (= `TrialRecord.dev_mean`, `ray_jobs.jobs.dev_parts`), and the
    SE of mean_λ − mean_best: with d = x_λ − x_best per example, SE² = Σ_j s²_j / n_j / t², s²_j task j's sample
    variance of d (ddof = 1; a task of one example adds none). `best`: the index of the best λ (the grid's rule)."""
    unpacked = [[flags.unpack(cell) if isinstance(cell, str) else np.asarray(cell, dtype=bool) for cell in cells]
                for cells in cells_per_lambda]
    reference = unpacked[best]
    result = []
    for cells in unpacked:
        if [c.size for c in cells] != [c.size for c in reference]:
            raise ValueError("every λ's dev cells must be over the same examples (the same sizes per task)")
        t = len(cells)
        mean = math.fsum(float(c.sum()) / c.size for c in cells) / t
        variance = math.fsum(float(np.var(c.astype(float) - r, ddof=1)) / c.size
                             for c, r in zip(cells, reference, strict=True) if c.size > 1)
        result.append(DevMean(mean, math.sqrt(variance) / t))
    return result
