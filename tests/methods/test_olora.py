"""O-LoRA (SPEC §7): the orthogonality and norm terms against hand-worked values, and what the former does."""

import pytest
import torch

from jumplora.methods.olora import norm_loss, orthogonality_loss, stack_past


def _hand_worked():
    past = {"a": torch.tensor([[1.0, 0.0, 2.0], [0.0, -1.0, 1.0]], dtype=torch.float64),
            "b": torch.tensor([[1.0, 1.0]], dtype=torch.float64),
            "only_past": torch.ones(1, 2, dtype=torch.float64)}
    current = {"a": torch.tensor([[3.0, 1.0, -1.0]], dtype=torch.float64, requires_grad=True),
               "b": torch.tensor([[2.0, -3.0], [1.0, 1.0]], dtype=torch.float64, requires_grad=True),
               "only_current": torch.ones(1, 2, dtype=torch.float64, requires_grad=True)}
    return past, current


def test_orthogonality_loss_by_hand():
    past, current = _hand_worked()
    # a: A_past A_tᵀ = [3 + 0 − 2, 0 − 1 − 1]ᵀ = [1, −2]ᵀ → 3; b: [2 − 3, 1 + 1] = [−1, 2] → 3; the rest: no pair
    assert float(orthogonality_loss(past, current).detach()) == 6.0


def test_orthogonality_gradient_is_sign_times_past():
    past, current = _hand_worked()
    orthogonality_loss(past, current).backward()
    for name in ("a", "b"):
        a_past = past[name].tolist()
        a_t = current[name].detach().tolist()
        expected = [[0.0] * len(a_t[0]) for _ in a_t]
        for i, past_row in enumerate(a_past):
            for j, row in enumerate(a_t):
                dot = sum(p * c for p, c in zip(past_row, row, strict=True))
                sign = (dot > 0) - (dot < 0)
                for k in range(len(row)):
                    expected[j][k] += sign * a_past[i][k]
        assert current[name].grad.tolist() == expected
    assert current["a"].grad.tolist() == [[1.0, 1.0, 1.0]]  # (+1)·[1, 0, 2] + (−1)·[0, −1, 1]
    assert current["only_current"].grad is None


def test_orthogonality_loss_is_zero_without_a_past():
    _, current = _hand_worked()
    value = orthogonality_loss({}, current)
    assert value.shape == () and float(value) == 0.0
    assert value.device == current["a"].device


def test_norm_loss_by_hand():
    a = torch.tensor([[3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64, requires_grad=True)
    fresh_b = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    value = norm_loss([a, b, fresh_b])
    # ‖a‖ = 5, ‖b‖ = √(1 + 4 + 4 + 16) = 5, ‖0‖ = 0: the norms, not their squares
    assert float(value.detach()) == 10.0
    value.backward()
    assert a.grad.flatten().tolist() == pytest.approx([0.6, 0.8])
    assert fresh_b.grad.tolist() == [[0.0, 0.0], [0.0, 0.0]]  # no NaN at a fresh lora_B
    assert float(norm_loss([])) == 0.0


def test_stack_past_appends_detached_copies():
    first = torch.tensor([[1.0, 2.0]], requires_grad=True)
    second = torch.tensor([[3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    stacked = stack_past(None, first)
    with torch.no_grad():
        first.add_(10.0)
    assert stacked.tolist() == [[1.0, 2.0]] and not stacked.requires_grad
    stacked = stack_past(stacked, second)
    assert stacked.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]] and not stacked.requires_grad


def _overlap_after_training(lambda1: float, seed: int) -> tuple[float, float]:
    """Adam on ‖A_t − T‖² + λ1 L_orth from a small random A_t (r = 2, d_in = 8, two past tasks of r = 2); returns
    Σ|A_past A_tᵀ| / (‖A_past‖ ‖A_t‖) and the toy loss at the end."""
    generator = torch.Generator().manual_seed(seed)
    past = torch.randn(4, 8, generator=generator, dtype=torch.float64)
    target = torch.randn(2, 8, generator=generator, dtype=torch.float64)
    a_t = (0.1 * torch.randn(2, 8, generator=generator, dtype=torch.float64)).requires_grad_(True)
    optimizer = torch.optim.Adam([a_t], lr=0.05)
    for _ in range(100):
        optimizer.zero_grad()
        toy = (a_t - target).square().sum()
        (toy + lambda1 * orthogonality_loss({"q": past}, {"q": a_t})).backward()
        optimizer.step()
    a_t = a_t.detach()
    overlap = (past @ a_t.T).abs().sum() / (torch.linalg.norm(past) * torch.linalg.norm(a_t))
    return float(overlap), float((a_t - target).square().sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_orthogonality_term_makes_the_new_rows_more_orthogonal(seed):
    plain, plain_toy = _overlap_after_training(0.0, seed)
    regularised, regularised_toy = _overlap_after_training(0.5, seed)
    # measured: 0.33 → 0.08, 0.50 → 0.14, 0.99 → 0.42
    assert regularised < 0.5 * plain
    assert plain_toy < 0.01 and regularised_toy > plain_toy  # the price: the toy target is fitted less well
