"""ELLA's penalty (SPEC §2) against hand-worked values."""

import pytest
import torch

from jumplora.methods.ella import Ella, ella_penalty


def test_penalty_is_mean_over_modules_with_a_past():
    deltas = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([[1.0, 1.0]]),
              "c": torch.tensor([[9.0]])}
    past = {"a": torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "b": torch.tensor([[3.0, -1.0]])}
    # a: 1² + (4·2)² = 65; b: 3² + 1² = 10; c has no past → M = 2
    assert float(ella_penalty(deltas, past)) == pytest.approx((65 + 10) / 2)


def test_penalty_is_zero_for_the_first_task():
    deltas = {"a": torch.ones(2, 2, requires_grad=True)}
    value = ella_penalty(deltas, {})
    assert float(value) == 0.0


def test_penalty_gradient():
    delta = torch.tensor([[1.0, -2.0]], requires_grad=True)
    ella_penalty({"a": delta}, {"a": torch.tensor([[3.0, 0.5]])}).backward()
    # d/dΔ Σ (Δ·P)² = 2 Δ P²
    assert delta.grad.flatten().tolist() == pytest.approx([2 * 1 * 9, 2 * -2 * 0.25])


def test_past_updates_accumulate_without_aliasing():
    memory = {}
    ella = Ella(memory, "sparse")
    first = {"a": torch.ones(2)}
    ella.remember(first, torch.device("cpu"))
    ella.remember({"a": torch.full((2,), 2.0), "b": torch.zeros(1)}, torch.device("cpu"))
    assert memory["a"].tolist() == [3.0, 3.0]  # the run's memory is W_past itself (what checkpoints save)
    assert first["a"].tolist() == [1.0, 1.0]
    assert set(memory) == {"a", "b"}
