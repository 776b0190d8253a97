"""OA, BWT, FWT on hand-worked matrices (SPEC §4)."""

import pytest

from jumplora.metrics import (
    backward_transfer,
    forward_transfer,
    forward_transfer_last_row,
    learning_accuracy,
    majority_baseline,
    overall_accuracy,
)

A = [
    [0.9, None, None],
    [0.7, 0.8, None],
    [0.6, 0.5, 0.7],
]
A0 = [0.8, 0.9, 0.6]


def test_overall_accuracy_is_mean_of_last_row():
    assert overall_accuracy(A) == pytest.approx(100 * (0.6 + 0.5 + 0.7) / 3)


def test_backward_transfer_uses_diagonal():
    # (0.6 − 0.9) + (0.5 − 0.8) over 2 tasks = −0.3
    assert backward_transfer(A) == pytest.approx(-30.0)


def test_forward_transfer_uses_diagonal_not_last_row():
    # (0.9 − 0.8) + (0.8 − 0.9) + (0.7 − 0.6) over 3 = 0.1 / 3
    assert forward_transfer(A, A0) == pytest.approx(100 * 0.1 / 3)


def test_forward_transfer_last_row_uses_the_last_row():
    # the authors' script: (0.6 − 0.8) + (0.5 − 0.9) + (0.7 − 0.6) over 3 = −0.5 / 3
    assert forward_transfer_last_row(A, A0) == pytest.approx(100 * -0.5 / 3)
    # = FWT + (T − 1)/T · BWT: 10/3 + 2/3 · (−30) = −50/3
    assert forward_transfer_last_row(A, A0) == pytest.approx(forward_transfer(A, A0) + 2 / 3 * backward_transfer(A))
    assert forward_transfer_last_row([[0.5]], [0.25]) == pytest.approx(forward_transfer([[0.5]], [0.25]))


def test_learning_accuracy_is_the_mean_of_the_diagonal():
    # each task just after it was learned: (0.9 + 0.8 + 0.7) / 3; the diagonal [0.8, 0.6]: 70
    assert learning_accuracy(A) == pytest.approx(80.0)
    assert learning_accuracy([[0.8, None], [0.1, 0.6]]) == pytest.approx(70.0)
    # BWT = (T/(T−1)) · (mean of the last row but its last − ...): OA − LA = mean_j (a[T][j] − a[j][j]) = (T−1)/T · BWT
    assert overall_accuracy(A) - learning_accuracy(A) == pytest.approx(2 / 3 * backward_transfer(A))


def test_single_task():
    assert backward_transfer([[0.5]]) == 0.0
    assert overall_accuracy([[0.5]]) == 50.0


def test_malformed_matrices_are_refused():
    with pytest.raises(ValueError):
        overall_accuracy([[0.5, None], [None, 0.4]])
    with pytest.raises(ValueError):
        forward_transfer(A, [0.1])
    with pytest.raises(ValueError):
        forward_transfer_last_row(A, [0.1])


def test_majority_baseline_is_the_largest_class_share():
    # 3 of 5 answers are "b": always answering "b" scores 0.6
    assert majority_baseline(["a", "b", "b", "c", "b"]) == pytest.approx(0.6)
    assert majority_baseline(["x"]) == 1.0
    with pytest.raises(ValueError):
        majority_baseline([])
