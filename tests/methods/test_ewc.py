"""EWC (SPEC §7): the penalty against element loops, the Fisher against the softmax classifier's closed form."""

import random
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from jumplora.methods.ewc import ewc_penalty, fisher_diagonal, fisher_sample


def _two_layers() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def test_penalty_value_and_gradient_against_element_loops():
    model = _two_layers()
    params = dict(model.named_parameters())
    generator = torch.Generator().manual_seed(1)
    chosen = ["0.weight", "2.bias"]  # 0.bias and 2.weight have no Fisher: no term, no gradient
    fisher = {name: torch.rand(params[name].shape, generator=generator, dtype=torch.float64) for name in chosen}
    anchor = {name: torch.randn(params[name].shape, generator=generator, dtype=torch.float64) for name in chosen}

    penalty = ewc_penalty(params, fisher, anchor)
    penalty.backward()

    expected = 0.0
    for name in chosen:
        for f, theta, star in zip(fisher[name].flatten().tolist(), params[name].detach().flatten().tolist(),
                                  anchor[name].flatten().tolist(), strict=True):
            expected += f * (theta - star) ** 2
    assert penalty.dtype == torch.float32
    assert float(penalty.detach()) == pytest.approx(expected, rel=1e-6)
    for name in chosen:
        manual = [2 * f * (theta - star) for f, theta, star in zip(
            fisher[name].flatten().tolist(), params[name].detach().flatten().tolist(),
            anchor[name].flatten().tolist(), strict=True)]
        assert params[name].grad.flatten().tolist() == pytest.approx(manual, rel=1e-6, abs=1e-7)
    assert params["0.bias"].grad is None
    assert params["2.weight"].grad is None


def test_penalty_is_zero_at_the_anchor_and_without_fisher():
    model = _two_layers()
    params = dict(model.named_parameters())
    fisher = {name: torch.ones_like(param) for name, param in params.items()}
    anchor = {name: param.detach().clone() for name, param in params.items()}
    assert float(ewc_penalty(params, fisher, anchor).detach()) == 0.0
    empty = ewc_penalty(params, {}, {})
    assert empty.shape == () and float(empty) == 0.0


def _softmax_classifier_data(n: int = 5, d: int = 3, k: int = 4):
    generator = torch.Generator().manual_seed(2)
    torch.manual_seed(3)
    model = nn.Linear(d, k).double()
    xs = torch.randn(n, d, generator=generator, dtype=torch.float64)
    ys = torch.randint(0, k, (n,), generator=generator)
    return model, xs, ys


def _nll(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x[None]), y[None])


def _closed_form_fisher(model: nn.Linear, xs: torch.Tensor, ys: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """F_W = (1/N) Σ_n ((p_n − e_yn) x_nᵀ)², F_b = (1/N) Σ_n (p_n − e_yn)², with p_n = softmax(W x_n + b)."""
    w = model.weight.detach().numpy()
    b = model.bias.detach().numpy()
    f_w = np.zeros_like(w)
    f_b = np.zeros_like(b)
    for x, y in zip(xs.numpy(), ys.numpy(), strict=True):
        z = w @ x + b
        p = np.exp(z - z.max())
        p /= p.sum()
        residual = p - np.eye(len(b))[y]
        f_w += np.outer(residual, x) ** 2
        f_b += residual ** 2
    return f_w / len(xs), f_b / len(xs)


def test_fisher_matches_the_softmax_closed_form():
    model, xs, ys = _softmax_classifier_data()
    params = dict(model.named_parameters())
    losses = [partial(_nll, model, x, y) for x, y in zip(xs, ys, strict=True)]

    fisher = fisher_diagonal(params, losses, n_total=len(xs))

    f_w, f_b = _closed_form_fisher(model, xs, ys)
    assert set(fisher) == {"weight", "bias"}
    assert fisher["weight"].dtype == torch.float32 and fisher["weight"].shape == model.weight.shape
    np.testing.assert_allclose(fisher["weight"].numpy(), f_w, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(fisher["bias"].numpy(), f_b, rtol=1e-5, atol=1e-8)


def test_fisher_of_worker_slices_sums_to_the_whole():
    model, xs, ys = _softmax_classifier_data()
    params = dict(model.named_parameters())
    losses = [partial(_nll, model, x, y) for x, y in zip(xs, ys, strict=True)]

    whole = fisher_diagonal(params, losses, n_total=5)
    first = fisher_diagonal(params, losses[:2], n_total=5)
    second = fisher_diagonal(params, losses[2:], n_total=5)

    for name in whole:
        torch.testing.assert_close(first[name] + second[name], whole[name])


def test_fisher_restores_requires_grad_and_grad():
    model = _two_layers()
    params = {"0.weight": model[0].weight, "2.bias": model[2].bias}
    model[0].weight.requires_grad_(False)
    earlier = torch.full_like(model[2].bias, 7.0)
    model[2].bias.grad = earlier.clone()
    x = torch.randn(2, 3, dtype=torch.float64)
    losses = [partial(lambda row: F.cross_entropy(model(row[None]), torch.tensor([1])), row) for row in x]

    with torch.no_grad():  # the caller may sit inside no_grad: the closures still build their graphs
        fisher = fisher_diagonal(params, losses, n_total=2)

    assert model[0].weight.requires_grad is False
    assert model[2].bias.requires_grad is True
    assert model[0].weight.grad is None
    torch.testing.assert_close(model[2].bias.grad, earlier)
    assert model[0].bias.grad is None and model[2].weight.grad is None  # parameters not asked for are untouched
    assert float(fisher["0.weight"].sum()) > 0.0 and float(fisher["2.bias"].sum()) > 0.0


def test_fisher_rejects_a_non_positive_count():
    model = _two_layers()
    with pytest.raises(ValueError, match="n_total"):
        fisher_diagonal(dict(model.named_parameters()), [], n_total=0)


def test_fisher_sample_is_seeded_distinct_and_bounded():
    random.seed(0)
    torch.manual_seed(0)
    first = fisher_sample(100, 10, seed=3, task_name="dbpedia")
    random.seed(123)
    torch.manual_seed(123)
    assert fisher_sample(100, 10, seed=3, task_name="dbpedia") == first
    assert len(first) == 10 and len(set(first)) == 10
    assert all(0 <= index < 100 for index in first)
    assert fisher_sample(100, 10, seed=4, task_name="dbpedia") != first
    assert fisher_sample(100, 10, seed=3, task_name="amazon") != first
    assert sorted(fisher_sample(6, 10, seed=3, task_name="dbpedia")) == list(range(6))
    assert fisher_sample(0, 10, seed=3, task_name="dbpedia") == []
