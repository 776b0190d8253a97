"""How sure a run's numbers are, from the per-example flags it keeps (`jumplora.flags`): a Wilson interval per accuracy
cell, a stratified, paired percentile bootstrap over the test examples per metric, comparisons of methods over seeds
and their test examples, a λ's dev mean and paired SE (docs/ARCHITECTURE.md); DECISIONS.md ("Intervals"; "Seeds are
the unit of evidence") says why these methods."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from jumplora import flags, metrics
from jumplora.errors import JumpLoRAError
from jumplora.results import PERCENT, RunResults

CONFIDENCE = 0.95
# bootstrap draws: between generator seeds an interval's ends move by about 0.1 point at 500 examples a task, 0.3 at
# 32 (where one example of 4 tasks × 32 moves OA by 0.8)
RESAMPLES = 2000
SEED = 0  # of the bootstrap's generator: the same flags give the same interval, byte for byte
# RunResults' names of the metrics with a bootstrap interval (`la`: learning accuracy, the diagonal's mean)
METRICS = tuple(PERCENT)
CELL_METHOD = "Wilson score interval (scipy.stats.binomtest(...).proportion_ci(method='wilson'))"
METRIC_METHOD = (f"percentile bootstrap over the test examples, stratified by task and paired (one draw per task for "
                 f"every cell of its column and its a0), {RESAMPLES} resamples, numpy default_rng([{SEED}, digest of "
                 "the data and tasks])")
NO_FLAGS = "no intervals (written before flags were kept)"
# under a summary's numbers
NOTE = (f"[low, high]: 95 % intervals; cells Wilson, OA/LA/BWT/FWT a bootstrap over the test examples (stratified by "
        f"task, paired, {RESAMPLES} resamples, seeded)")
# under `jumplora eval`'s rows
ROW_NOTE = (f"[low, high]: 95 % intervals; a task's Wilson, the mean's a bootstrap over the test examples (stratified "
            f"by task, {RESAMPLES} resamples, seeded)")


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
    report's authors' scoring, `report.unlabelled_factors`; 1 otherwise) and `key`, per task which test examples it
    scored (`task_key`): runs that share a task's key scored the same examples of it, in the same order, whatever
    their order of tasks or caps of training, so their draws of that task are shared (`bootstrap`, `compare`)."""

    key: tuple[tuple, ...]
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
        sizes = [cell.size for cell in test[-1]]
        key = tuple(task_key(results, j, n) for j, n in enumerate(sizes))
        return cls(key=key, test=test, a0=own, a0_shared=shared, joint=results.joint,
                   factors=tuple(factors or [1.0] * len(sizes)))

    def column(self, j: int) -> list[np.ndarray]:
        """The cells of task j: its test cells (rows i ≥ j; a joint method's one row) and its a0s."""
        cells = [row[j] for row in self.test if len(row) > j]
        return cells + [row[j] for row in (self.a0, self.a0_shared) if row is not None]

    def point(self) -> dict[str, float]:
        """The metrics of the flags as they are (the run's own numbers, but under `--authors-compat` with a cap, where
        the flags hold a whole number of rows outside the options: `metrics.authors_wrong_rows`); NaN over a task of
        no example."""
        return {name: float(value) for name, value in
                metrics_of(self, lambda cell, j: cell.mean() if cell.size else math.nan).items()}


def task_key(results: RunResults, j: int, size: int) -> tuple:
    """Which test examples task j of the run scored: the digest of the task's test examples (`test_fingerprints`),
    its name and how many flags its cells hold. A run written before the digests were recorded: its data fingerprint
    and seed instead of the digest, which tells the same examples apart only within one seed's data (runs of one
    seed and other orders of the same tasks share it; other caps of training do not)."""
    digests = results.test_fingerprints
    identity = digests[j] if digests else (results.data_fingerprint, results.seed)
    return (identity, results.tasks[j] if results.tasks else j, size)


def metrics_of(run: RunFlags, mean: Callable[[np.ndarray, int], np.ndarray | float]) -> dict[str, np.ndarray | float]:
    """The run's metrics (percent, the `METRICS` it has) with `mean(cell, j)` as the accuracy of each cell of task j
    (times the task's factor): the formulas of `jumplora.metrics`, on numbers or on arrays of resamples alike."""

    def accuracy(cell: np.ndarray, j: int):
        return mean(cell, j) * run.factors[j]

    size = len(run.key)
    if run.joint:
        return {"oa": metrics.joint_overall_accuracy([accuracy(cell, j) for j, cell in enumerate(run.test[0])])}
    a = [[accuracy(cell, j) for j, cell in enumerate(row)] + [None] * (size - len(row)) for row in run.test]
    values = {"oa": metrics.overall_accuracy(a), "la": metrics.learning_accuracy(a),
              "bwt": metrics.backward_transfer(a)}
    for name, a0, formula in (("fwt", run.a0, metrics.forward_transfer),
                              ("fwt_last_row", run.a0_shared, metrics.forward_transfer_last_row)):
        if a0 is not None:
            values[name] = formula(a, [accuracy(cell, j) for j, cell in enumerate(a0)])
    return values


def generator(key: tuple, seed: int) -> np.random.Generator:
    """The bootstrap's generator of one task's test examples (`task_key`): seeded with `seed` and a digest of the
    key, so a task's draws do not depend on which other runs are resampled with it (a run's interval in a report is
    its results.json's) and every run that scored those examples draws the same indices."""
    digest = hashlib.sha256(json.dumps(key).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def bootstrap(runs: Sequence[RunFlags], seed: int = SEED, resamples: int = RESAMPLES) -> list[dict[str, np.ndarray]]:
    """Each run's metrics on `resamples` bootstrap resamples (`metrics_of`): per task key (`task_key`, `generator`),
    one (resamples × n) draw of the task's example indices, with which every cell of the task's column (`column`) of
    every run that scored those examples is averaged, so such runs are paired (a seed's orders included); a draw is
    dropped once its task is done. A task of no example gives NaN resamples."""
    means: dict[int, np.ndarray] = {}  # id of a cell → its accuracy on each resample
    for key in dict.fromkeys(key for run in runs for key in run.key):
        n = key[-1]
        indices = generator(key, seed).integers(0, n, size=(resamples, n)) if n else None
        for cell in (cell for run in runs for j, own in enumerate(run.key) if own == key for cell in run.column(j)):
            means[id(cell)] = cell[indices].mean(axis=1) if n else np.full(resamples, np.nan)
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
    cells = {name: [[cell_interval(u) if (u := flags.unpack(c)).size else None for c in row]
                    + [None] * (size - len(row)) for row in getattr(results, key)]
             for name, key in CELL_KEYS.items() if getattr(results, key)}
    return RunIntervals(cells=cells, metrics=metric_intervals(run))


def metric_intervals(run: RunFlags) -> dict[str, Interval]:
    """The bootstrap interval (percent) of each metric of `run` (`bootstrap`); none of a metric over a task of no
    example (NaN resamples)."""
    return {name: percentile_interval(v) for name, v in bootstrap([run])[0].items() if np.isfinite(v).all()}


def intervals_of(results: RunResults) -> RunIntervals | None:
    """The intervals results.json holds; None for a run written before flags were kept."""
    return None if results.intervals is None else RunIntervals.from_json(results.intervals)


def mean_interval(cells: Sequence[np.ndarray], keys: Sequence[tuple]) -> Interval | None:
    """The 95 % bootstrap interval (percent) of the mean over tasks of one accuracy row, `cells` one per task, each
    keyed by its `task_key`: resampled as `run_intervals` resamples a run (a joint row's OA), so a run's last row
    keyed as the run gets its OA's interval, draw for draw (`jumplora eval`'s mean row); None over a task of no
    example."""
    return metric_intervals(RunFlags(key=tuple(keys), test=[list(cells)], a0=None, a0_shared=None, joint=True,
                                     factors=(1.0,) * len(cells))).get("oa")


# ---------------------------------------------------------------- several seeds, and comparisons


# how a comparison's interval and probability of improvement are computed, in words (the report's comparison table)
COMPARISON_METHOD = ("over the seeds and their test examples: a Student t interval over the seeds (n − 1 degrees of "
                     "freedom where each seed scored its own test examples) whose standard error adds what the test "
                     "examples the seeds share add (the paired, task-stratified bootstrap's variance, exact; runs "
                     "that scored the same examples share them); with one seed, over the test examples of that one "
                     "training run alone (the normal's quantile)")
IMPROVEMENT_METHOD = ("as rliable's: P(X > Y) over every pair of the two methods' seeds, ties half, with the "
                      "percentile interval of a bootstrap over the seeds (from two seeds a side; – otherwise)")
FEWEST_EXAMPLES = 2  # a task scored on fewer test examples gives no verdict: one example has no variance to show


@dataclass(frozen=True)
class Improvement:
    """rliable's probability of improvement, P(X > Y), and its 95 % interval (`probability_of_improvement`)."""

    value: float
    interval: Interval


@dataclass(frozen=True)
class Comparison:
    """`other` − `reference` of one metric (percent points; `compare`): the mean over seeds of the paired differences
    (`difference`), its standard error over the training runs and their test examples (`se`), the degrees of freedom
    of its quantile (`dof`; None: the normal's, as with one seed, whose interval is over its test examples alone), how
    many seeds and training runs a side (`runs`: seeds × orders) it rests on, how many comparisons its table makes
    (`family`: each interval at 1 − 0.05 / family, Bonferroni, so that all of them hold together at 95 %), rliable's
    probability of improvement (None with fewer than two seeds) and why it gives no verdict (`refused`)."""

    metric: str
    difference: float
    se: float
    dof: float | None
    seeds: int
    runs: int
    family: int = 1
    improvement: Improvement | None = None
    refused: str | None = None

    @property
    def confidence(self) -> float:
        return 1 - (1 - CONFIDENCE) / self.family

    @property
    def interval(self) -> Interval | None:
        """difference ± q × se at `confidence`, q the two-sided quantile of Student's t with `dof` degrees of freedom
        (a standard error estimated from that few seeds), the normal's for None (a variance the test examples give,
        known); None when refused."""
        if self.refused is not None:
            return None
        from scipy import special  # loaded by what compares, not by `jumplora --help`

        tail = 1 - (1 - self.confidence) / 2
        half = float(special.ndtri(tail) if self.dof is None else special.stdtrit(self.dof, tail)) * self.se
        return Interval(self.difference - half, self.difference + half)

    @property
    def real(self) -> bool:
        """Whether the interval lies wholly above or wholly below 0: a difference the data show at this size."""
        interval = self.interval
        return interval is not None and (interval.low > 0 or interval.high < 0)

    @property
    def verdict(self) -> str:
        """"a difference" or "within noise at this size", always with what it rests on (`basis_text`)."""
        if self.refused is not None:
            return f"no verdict: {self.refused}"
        return f"{'a difference' if self.real else 'within noise at this size'} {basis_text(self.seeds, self.runs)}"

    def sentence(self, other: str, reference: str) -> str:
        """One plain sentence."""
        name = METRIC_NAMES[self.metric]
        if self.refused is not None:
            return f"{other}'s {name} against {reference}'s: {self.verdict}."
        improvement = "" if self.improvement is None else \
            (f", probability of improvement {self.improvement.value:.2f} {self.improvement.interval.text(digits=2)}")
        what = (f"{other}'s {name} is {self.difference:+.2f} points against {reference}'s ({level_text(self.family)} "
                f"interval {self.interval.text(digits=2)} {scope_text(self.seeds, self.runs)}{improvement})")
        direction = f" ({'higher' if self.difference > 0 else 'lower'})" if self.real else ""
        return f"{what}: {self.verdict}{direction}."

    def to_json(self) -> dict:
        interval, improvement = self.interval, self.improvement
        return {"difference": self.difference if math.isfinite(self.difference) else None,
                "se": self.se if math.isfinite(self.se) else None, "dof": self.dof, "confidence": self.confidence,
                "family": self.family, "interval": None if interval is None else interval.to_json(),
                "runs": self.runs, "real": self.real, "verdict": self.verdict, "refused": self.refused,
                "improvement": None if improvement is None else improvement.value,
                "improvement_interval": None if improvement is None else improvement.interval.to_json()}


METRIC_NAMES = {"oa": "OA", "la": "learning accuracy", "bwt": "BWT", "fwt": "FWT", "fwt_last_row": "FWT last row"}


def diagonal(run: RunFlags) -> list[float]:
    """Each task's accuracy right after it was learned, in percent (the matrix's diagonal; times the task's factor),
    from the flags: the cells `metrics.learning_accuracy` averages. A joint method (one row) has none: []."""
    if run.joint:
        return []
    return [100 * float(run.test[j][j].mean()) * run.factors[j] if run.test[j][j].size else math.nan
            for j in range(len(run.key))]


def trade_off(reference: Sequence[RunFlags], other: Sequence[RunFlags], forgetting: Comparison | None,
              learning: Comparison | None, other_name: str, reference_name: str) -> str | None:
    """The sentence that says a lower forgetting is a trade-off, not a gain, or None: when `other` forgets less than
    `reference` (`forgetting`, BWT's comparison of the paired runs: a higher BWT) while it learned less (`learning`,
    the learning accuracy's comparison: lower, and a difference the data show). It names the tasks learned less: those
    whose diagonal fell at least as much as the learning accuracy (the mean of the diagonal's differences; so at
    least the one that fell most), each with its accuracy right after it was learned on both sides (`diagonal`,
    averaged over the pairs), as `task k (name)` where every pair trained it at the same position."""
    if forgetting is None or learning is None or forgetting.refused is not None or not (
            forgetting.difference > 0 and learning.real and learning.difference < 0):  # a refused one is not real
        return None
    pairs = checked_pairs(reference, other)
    names = [[key[1] for key in run.key] for run, _ in pairs]
    sides: dict[object, list[tuple[float, float]]] = {}
    for (a, b), order in zip(pairs, names, strict=True):
        for task, x, y in zip(order, diagonal(a), diagonal(b), strict=True):
            sides.setdefault(task, []).append((x, y))
    means = {task: tuple(sum(side) / len(side) for side in zip(*found, strict=True))
             for task, found in sides.items()}
    lower = sorted((task for task, (x, y) in means.items() if y - x <= learning.difference),
                   key=lambda task: means[task][1] - means[task][0])
    same_place = all(order == names[0] for order in names)

    def where(task: object) -> str:
        return f"task {names[0].index(task) + 1} ({task})" if same_place else str(task)

    them = " and ".join(where(task) for task in lower)
    accuracies = ", ".join(f"{means[task][1]:.1f} against {means[task][0]:.1f}" for task in lower)
    noise = "" if forgetting.real else ", within noise at this size"
    return (f"{other_name} forgets less than {reference_name} (BWT {forgetting.difference:+.2f} points{noise}), but "
            f"learned {them} less ({'its' if len(lower) == 1 else 'their'} accuracy right after learning "
            f"{'it' if len(lower) == 1 else 'them'} {accuracies} %; learning accuracy {learning.difference:+.2f} "
            f"points, {learning.verdict}): a trade-off, not a gain.")


def basis_text(seeds: int, runs: int) -> str:
    """What a verdict rests on: the test examples of one training run (the training's own noise, its seed and order,
    is not in it), or so many seeds (and orders)."""
    if seeds == 1:
        return "on these test examples, for this one training run" if runs == 1 else \
            f"on these test examples, for these {runs} training runs of one seed"
    if runs == seeds:
        return f"over {seeds} seeds"
    return f"over {seeds} seeds, {runs // seeds} orders each" if runs % seeds == 0 else \
        f"over {seeds} seeds ({runs} training runs)"


def scope_text(seeds: int, runs: int) -> str:
    """What an interval is over."""
    if seeds == 1:
        return "over the test examples of one training run" if runs == 1 else \
            f"over the test examples of {runs} training runs of one seed"
    return f"{basis_text(seeds, runs)} and their test examples"


def level_text(family: int) -> str:
    """An interval's confidence in percent: 95, or 1 − 0.05 / k of a table of k comparisons."""
    return f"{100 * (1 - (1 - CONFIDENCE) / family):.4g} %"


def family_text(k: int) -> str:
    """What a table of k comparisons says of them."""
    if k == 0:
        return "no comparison gives a verdict"
    if k == 1:
        return "1 comparison, its interval at 95 %"
    return (f"{k} comparisons, each interval at {level_text(k)} (Bonferroni) so that all {k} hold together at 95 %: "
            f"a difference in any of them is one at 95 %")


def in_family(found: Sequence[Comparison | None]) -> list[Comparison | None]:
    """The comparisons of one table, each at the family's confidence (`Comparison.family`: those with a verdict)."""
    k = max(1, sum(c is not None and c.refused is None for c in found))
    return [None if c is None else dataclasses.replace(c, family=k) for c in found]


def example_terms(run: RunFlags, metric: str) -> dict[tuple, np.ndarray] | None:
    """Per task key (`RunFlags.key`), each test example's share of the run's `metric`, so that the metric is the sum
    over tasks of their shares' means. The metrics are linear in the cells' accuracies (`jumplora.metrics`: means and
    differences of them, times the tasks' factors), so the weight of each cell is read by evaluating them on unit
    vectors; the bootstrap's variance of any sum of such metrics is then Σ_tasks var(shares) / n, exactly. None when
    the run lacks `metric`."""
    cells = {id(cell): (j, cell) for j in range(len(run.key)) for cell in run.column(j)}
    index = {ident: k for k, ident in enumerate(cells)}
    unit = np.eye(len(cells))
    weights = metrics_of(run, lambda cell, j: unit[index[id(cell)]]).get(metric)
    if weights is None:
        return None
    terms = {key: np.zeros(key[-1]) for key in run.key}
    for ident, (j, cell) in cells.items():
        terms[run.key[j]] = terms[run.key[j]] + weights[index[ident]] * cell
    return terms


def stratified_variance(per_task: Iterable[np.ndarray], ddof: int) -> float:
    """The variance of Σ_tasks mean(values) when each task's examples are drawn within it, as many as it has:
    Σ_tasks var(values) / n, var with `ddof` (0: the population variance, the stratified bootstrap's of the test
    examples, exact; 1: the sample variance, a task of one example adding none)."""
    return math.fsum(float(np.var(v, ddof=ddof)) / v.size for v in per_task if v.size > ddof)


def checked_pairs(reference: Sequence[RunFlags], other: Sequence[RunFlags]) -> list[tuple[RunFlags, RunFlags]]:
    """The runs paired in order; a ValueError unless there are as many on each side, each pair on the same test
    examples (`RunFlags.key`)."""
    if len(reference) != len(other) or not reference:
        raise ValueError(f"compare needs as many runs on each side, got {len(reference)} and {len(other)}")
    for a, b in zip(reference, other, strict=True):
        if a.key != b.key:
            raise ValueError("the runs compared were not evaluated on the same test examples (data, tasks or caps "
                             "differ)")
    return list(zip(reference, other, strict=True))


def refusal(pairs: Sequence[tuple[RunFlags, RunFlags]], points: Sequence[float]) -> str | None:
    """Why the pairs give no verdict (a task of too few test examples, a number that is not one); None when none."""
    for key in dict.fromkeys(key for run, _ in pairs for key in run.key):
        if key[-1] < FEWEST_EXAMPLES:
            return f"task {key[1]} has {key[-1]} test example{'' if key[-1] == 1 else 's'}"
    if not all(math.isfinite(p) for p in points):
        return "a metric is not a number"
    return None


def compare(reference: Sequence[RunFlags], other: Sequence[RunFlags], metric: str,
            seeds: Sequence[object] | None = None, family: int = 1) -> Comparison | None:
    """`other` against `reference` on `metric`: runs paired in order (each pair on the same test examples:
    `checked_pairs`), `seeds` the seed of each pair (default: each pair its own; pairs of one seed, its orders, are
    averaged first). The two levels of noise (DECISIONS.md, "Seeds are the unit of evidence"):

    - d_s, seed s's mean paired difference; the difference is their mean over the n seeds;
    - W_s, the variance of d_s over its test examples, and W, that of the mean: the paired, task-stratified bootstrap's
      variance, exact (`example_terms`; runs that scored the same examples of a task share them, a seed's orders
      included, so their covariance counts);
    - SE² = S² / n + C: S² the sample variance of the d_s (the training's noise and each seed's own test examples'),
      C = max(0, n² W − Σ W_s) / (n (n − 1)) the covariance of the seeds' test-example noise (0 when the seeds scored
      other examples; the examples they share, which S² cannot show, otherwise); the interval difference ± q SE at
      1 − 0.05 / `family`, q Student's t with Welch–Satterthwaite's ν = SE⁴ (n − 1) / (S² / n)² degrees of freedom
      (n − 1 when C is 0: the t interval over seeds). One seed: ± z √W, over its test examples alone (`basis_text`
      says so); seeds that agree exactly (S² = 0, which finite test examples allow): ± z √W as well, the test
      examples' interval, not one of no width.

    rliable's probability of improvement from two seeds on (`probability_of_improvement`); no verdict (`refusal`) for
    a task of fewer than two examples or a NaN. None when a run lacks the metric."""
    pairs = checked_pairs(reference, other)
    units = list(range(len(pairs))) if seeds is None else list(seeds)
    if len(units) != len(pairs):
        raise ValueError(f"compare needs a seed per pair of runs, got {len(units)} for {len(pairs)}")
    terms = [(example_terms(a, metric), example_terms(b, metric)) for a, b in pairs]
    if any(t is None for pair in terms for t in pair):
        return None
    groups = {unit: [k for k, u in enumerate(units) if u == unit] for unit in dict.fromkeys(units)}
    points = [(a.point()[metric], b.point()[metric]) for a, b in pairs]
    per_seed = [[math.fsum(points[k][side] for k in members) / len(members) for members in groups.values()]
                for side in (0, 1)]
    differences = [b - a for a, b in zip(*per_seed, strict=True)]
    n, difference = len(groups), math.fsum(differences) / len(groups)
    refused = refusal(pairs, [p for pair in points for p in pair])
    if refused is not None:
        return Comparison(metric, difference, math.nan, None, n, len(pairs), family, None, refused)
    seed_terms = [mean_shares([{key: b[key] - a[key] for key in a} for a, b in (terms[k] for k in members)])
                  for members in groups.values()]
    within = stratified_variance(mean_shares(seed_terms).values(), 0)
    improvement = probability_of_improvement(per_seed[1], per_seed[0]) if n > 1 else None
    spread = float(np.var(differences, ddof=1)) / n if n > 1 else 0.0
    if spread == 0:  # one seed, or seeds that agree exactly (finite test examples allow it): no evidence of no noise
        return Comparison(metric, difference, math.sqrt(within), None, n, len(pairs), family, improvement)
    own = math.fsum(stratified_variance(t.values(), 0) for t in seed_terms)  # each seed's W_s
    shared = max(0.0, n * n * within - own) / (n * (n - 1))
    dof = (spread + shared) ** 2 / (spread ** 2 / (n - 1))
    return Comparison(metric, difference, math.sqrt(spread + shared), dof, n, len(pairs), family, improvement)


def mean_shares(terms: Sequence[dict[tuple, np.ndarray]]) -> dict[tuple, np.ndarray]:
    """The per-example shares of the mean of `terms` (a seed's paired differences over its orders, or the seeds'):
    those that scored the same examples of a task add up on them."""
    shares: dict[tuple, np.ndarray] = {}
    for found in terms:
        for key, values in found.items():
            shares[key] = shares.get(key, 0.0) + values / len(terms)
    return shares


def mann_whitney(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) over every pair (x_i, y_j) of the last axis: U / (n m)."""
    gap = x[..., :, None] - y[..., None, :]
    return np.mean(gap > 0, axis=(-2, -1)) + 0.5 * np.mean(gap == 0, axis=(-2, -1))


def probability_of_improvement(x: Sequence[float], y: Sequence[float], seed: int = SEED,
                               resamples: int = RESAMPLES) -> Improvement:
    """rliable's probability of improvement of X over Y (Agarwal et al. 2021, `rliable.metrics.
    probability_of_improvement` for one task): the Mann–Whitney U over the runs, 1/(n m) Σ_i Σ_j S(x_i, y_j), S 1 if
    x_i > y_j, ½ if equal, 0 else, every pair of runs (not only the seed's own, as rliable's); its interval as
    rliable's: the percentile interval over `resamples` draws of each side's runs with replacement (seeded)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng([seed, x.size, y.size])
    drawn = mann_whitney(x[rng.integers(0, x.size, (resamples, x.size))],
                         y[rng.integers(0, y.size, (resamples, y.size))])
    return Improvement(float(mann_whitney(x, y)), percentile_interval(drawn))


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
    empty = [j + 1 for j, cell in enumerate(reference) if not cell.size]
    if empty:  # no dev mean to take, nor a standard error: one line, not a ZeroDivisionError
        raise JumpLoRAError(f"the dev split of task {empty[0]} of the stage holds no example: a λ cannot be chosen on "
                            "it; give every task dev examples (--max-eval-per-task ≥ 1, a dev file that is not empty)")
    result = []
    for cells in unpacked:
        if [c.size for c in cells] != [c.size for c in reference]:
            raise ValueError("every λ's dev cells must be over the same examples (the same sizes per task)")
        mean = math.fsum(float(c.sum()) / c.size for c in cells) / len(cells)
        differences = [c.astype(float) - r for c, r in zip(cells, reference, strict=True)]
        result.append(DevMean(mean, stratified_se(differences)))
    return result


def stratified_se(per_task: Sequence[np.ndarray]) -> float:
    """The standard error of the mean over tasks of each task's mean of `per_task` (a value per example), each task's
    examples drawn within it: √(Σ_j s²_j / n_j) / t, s²_j task j's sample variance (`stratified_variance`)."""
    return math.sqrt(stratified_variance(per_task, 1)) / len(per_task)


def dev_mean_se(cells: Sequence[str | np.ndarray]) -> float:
    """The standard error of a λ's dev mean itself (a fraction; `dev_mean_and_se`'s mean, not a difference to the
    best) over its dev examples: `stratified_se` of its flags (cells packed or not, tasks 1..t)."""
    return stratified_se([(flags.unpack(c) if isinstance(c, str) else np.asarray(c)).astype(float) for c in cells])
