"""Continual-learning metrics on a T×T accuracy matrix of fractions, lower triangle filled (SPEC §4), percent out;
the majority-class baseline of a split, a fraction like the matrix entries; and the authors' scoring of test rows
labelled outside the options (SPEC §4: MNLI's "-")."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Matrix = Sequence[Sequence[float | None]]


def _check(a: Matrix, a0: Sequence[float] | None = None) -> int:
    size = len(a)
    if size == 0:
        raise ValueError("the accuracy matrix is empty")
    for i, row in enumerate(a):
        if len(row) != size or any(row[j] is None for j in range(i + 1)):
            raise ValueError(f"row {i} of the accuracy matrix must have {size} entries, filled up to the diagonal")
    if a0 is not None and len(a0) != size:
        raise ValueError(f"need {size} single-task accuracies, got {len(a0)}")
    return size


def overall_accuracy(a: Matrix) -> float:
    """OA = mean_j a[T][j], in percent."""
    size = _check(a)
    return 100.0 * sum(a[size - 1][j] for j in range(size)) / size


def joint_overall_accuracy(row: Sequence[float]) -> float:
    """OA of a joint method (MTL: one training on every task, one row): mean_j a[0][j], in percent."""
    return 100.0 * sum(row) / len(row)


def backward_transfer(a: Matrix) -> float:
    """BWT = mean_{j<T} (a[T][j] − a[j][j]), in percent (0 for a single task)."""
    size = _check(a)
    if size == 1:
        return 0.0
    return 100.0 * sum(a[size - 1][j] - a[j][j] for j in range(size - 1)) / (size - 1)


def learning_accuracy(a: Matrix) -> float:
    """LA = mean_j a[j][j], in percent: each task's accuracy right after it was learned, the plasticity beside BWT's
    forgetting (Chaudhry et al. 2018; Mirzadeh et al. 2020's "learning accuracy"). A task learned to less has less to
    forget: a method's higher BWT at a lower LA is a trade-off, not a gain (`uncertainty.trade_off`)."""
    size = _check(a)
    return 100.0 * sum(a[j][j] for j in range(size)) / size


def forward_transfer(a: Matrix, a0: Sequence[float]) -> float:
    """FWT = mean_j (a[j][j] − a0[j]), in percent; `a0[j]` is task j's single-task accuracy."""
    size = _check(a, a0)
    return 100.0 * sum(a[j][j] - a0[j] for j in range(size)) / size


def forward_transfer_last_row(a: Matrix, a0: Sequence[float]) -> float:
    """mean_j (a[T][j] − a0[j]), in percent: the authors' evaluation script's FWT (last row), which the paper's FWT
    column matches (SPEC §4); equals `forward_transfer` + (T − 1)/T · `backward_transfer`."""
    size = _check(a, a0)
    return 100.0 * sum(a[size - 1][j] - a0[j] for j in range(size)) / size


def majority_baseline(labels: Sequence[str]) -> float:
    """The accuracy (a fraction) of always answering the most frequent label: what a model scores that learned only
    the label prior, the bar a task's accuracy must clear to show it read the inputs."""
    if not labels:
        raise ValueError("cannot take the majority class of an empty split")
    return Counter(labels).most_common(1)[0][1] / len(labels)


def authors_accuracy(correct: float, scored: int, labelled: int, unlabelled: int) -> float:
    """Accuracy with the test rows labelled outside the options counted as wrong, as the authors' script scores the
    whole test file (SPEC §4): correct / (scored + unlabelled · scored / labelled). With every labelled row scored this
    is correct / (labelled + unlabelled); under a cap (`scored` < `labelled`) the rows outside the options keep their
    share of the file. `unlabelled` = 0 gives the plain accuracy correct / scored."""
    if scored == 0:
        return 0.0
    return correct / (scored + unlabelled * scored / labelled) if unlabelled else correct / scored


def authors_wrong_rows(scored: int, labelled: int, unlabelled: int) -> int:
    """How many wrong flags a cell's flags (`jumplora.flags`) hold for the rows outside the options under the authors'
    scoring: the `unlabelled · scored / labelled` of `authors_accuracy`, rounded half up to a whole row. With every
    labelled row scored it is `unlabelled` and the flags' mean is the accuracy exactly; under a cap the mean is within
    half a row of it (DECISIONS)."""
    return math.floor(unlabelled * scored / labelled + 0.5) if unlabelled else 0


def authors_factor(labelled: int, unlabelled: int) -> float:
    """What an accuracy over the labelled rows is multiplied by to score the rows outside the options as wrong:
    labelled / (labelled + unlabelled) (`authors_accuracy` = correct / scored × this factor)."""
    return labelled / (labelled + unlabelled) if unlabelled else 1.0
