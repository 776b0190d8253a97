"""Sparsity and Jaccard overlap of merged updates (SPEC §4), on hand-made supports."""

import pytest
import torch

from jumplora import analysis

Q0 = "encoder.block.0.layer.0.SelfAttention.q"
V0 = "encoder.block.0.layer.0.SelfAttention.v"
Q1 = "encoder.block.1.layer.0.SelfAttention.q"
Q2 = "encoder.block.2.layer.0.SelfAttention.q"


def test_sparsity_per_module_and_layer():
    updates = {Q0: torch.tensor([[1.0, 0.0], [0.0, 0.0]]), V0: torch.tensor([[1.0, 2.0], [0.0, 3.0]]),
               Q1: torch.zeros(2, 2)}
    found = analysis.sparsity(updates)
    assert found["per_module"] == {Q0: 0.75, V0: 0.25, Q1: 1.0}
    assert found["per_layer"] == {"encoder.block.0": 0.5, "encoder.block.1": 1.0}
    assert found["overall"] == pytest.approx(8 / 12)  # 3 + 1 + 4 zeros
    assert list(found) == ["overall", "per_layer", "per_module"]  # the order a TaskRecord's sparsity is written in


def test_jaccard_of_supports():
    a = torch.tensor([1.0, 2.0, 0.0, 0.0])
    b = torch.tensor([-5.0, 0.0, 3.0, 0.0])
    assert analysis.jaccard(a, b) == pytest.approx(1 / 3)
    assert analysis.jaccard(torch.zeros(3), torch.zeros(3)) == 1.0


def test_overlap_with_earlier_tasks_in_the_middle_block():
    def task(values):
        return {Q0: torch.ones(2), Q1: torch.tensor(values), Q2: torch.ones(2)}

    tasks = [task([1.0, 0.0]), task([1.0, 1.0]), task([0.0, 1.0])]
    assert analysis.middle_block([Q0, Q1, Q2]) == "encoder.block.1"
    # task 1 vs 0: 1/2; task 2 vs 0: 0, vs 1: 1/2 → mean 1/4
    assert analysis.overlap_with_earlier(tasks) == [None, pytest.approx(0.5), pytest.approx(0.25)]
    matrix = analysis.jaccard_matrix(tasks)
    assert matrix[0][2] == pytest.approx((1 + 0 + 1) / 3)
