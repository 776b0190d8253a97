"""symmetric_jump, threshold_for_count and jump_schedule against hand-worked values (SPEC §1)."""

import math

import pytest
import torch

from jumplora.errors import JumpLoRAError
from jumplora.ops import jump_schedule, schedule_bounds, symmetric_jump, threshold_for_count

TAU, EPS = 0.5, 0.1  # kernel windows: (0.45, 0.55) for the +ΔW branch, (-0.55, -0.45) for the −ΔW branch
DELTA = [0.52, 0.48, -0.53, -0.47, 0.9, -0.1, 0.0, 0.56]
GRAD_OUT = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
KEPT = [1, 0, 1, 0, 1, 0, 0, 1]  # |ΔW| > τ
# d/dτ by hand: + branch window holds entries 0, 1 → −(τ/ε)(1 + 2) = −15; − branch window holds 2, 3 → +(τ/ε)(3 + 4)
# = +35; summed = 20; "mean" divides each branch by the 8 entries.
TAU_GRAD_SUM = 20.0


def _run(reduction: str):
    delta = torch.tensor(DELTA, dtype=torch.float64, requires_grad=True)
    log_tau = torch.tensor(math.log(TAU), dtype=torch.float64, requires_grad=True)
    out = symmetric_jump(delta, log_tau.exp(), EPS, reduction)
    out.backward(torch.tensor(GRAD_OUT, dtype=torch.float64))
    return out, delta.grad, log_tau.grad


def test_forward_keeps_entries_above_tau_with_sign():
    out, _, _ = _run("mean")
    expected = [d * k for d, k in zip(DELTA, KEPT, strict=True)]
    assert out.tolist() == pytest.approx(expected)


def test_delta_gradient_is_the_mask():
    _, grad, _ = _run("mean")
    assert grad.tolist() == pytest.approx([g * k for g, k in zip(GRAD_OUT, KEPT, strict=True)])


@pytest.mark.parametrize(("reduction", "tau_grad"), [("mean", TAU_GRAD_SUM / 8), ("sum", TAU_GRAD_SUM)])
def test_threshold_gradient_both_branches(reduction, tau_grad):
    _, _, log_tau_grad = _run(reduction)
    assert float(log_tau_grad) == pytest.approx(tau_grad * TAU)  # chain rule through τ = exp(log τ)


def test_only_one_branch_near_plus_tau():
    delta = torch.tensor([0.51, 2.0], requires_grad=True)
    tau = torch.tensor(TAU, requires_grad=True)
    symmetric_jump(delta, tau, EPS, "sum").sum().backward()
    assert float(tau.grad) == pytest.approx(-TAU / EPS)


def test_gradient_flows_to_lora_factors_through_the_mask():
    a = torch.tensor([[1.0, -2.0]], requires_grad=True)  # A: (r=1, d_in=2)
    b = torch.tensor([[0.5], [0.1]], requires_grad=True)  # B: (d_out=2, r=1)
    out = symmetric_jump(b @ a, torch.tensor(0.3), 1e-3)  # ΔW = [[0.5, -1.0], [0.1, -0.2]] → mask [[1, 1], [0, 0]]
    out.sum().backward()
    # dL/dΔW = mask; dL/dA = Bᵀ mask = [0.5, 0.5]; dL/dB = mask Aᵀ = [[1 - 2], [0]]
    assert a.grad.flatten().tolist() == pytest.approx([0.5, 0.5])
    assert b.grad.flatten().tolist() == pytest.approx([-1.0, 0.0])


def test_bad_bandwidth_and_reduction_are_refused():
    with pytest.raises(JumpLoRAError, match="bandwidth"):
        symmetric_jump(torch.ones(2), torch.tensor(0.1), 0.0)
    with pytest.raises(JumpLoRAError, match="reduction"):
        symmetric_jump(torch.ones(2), torch.tensor(0.1), 0.1, "max")


@pytest.mark.parametrize(
    ("values", "n_above", "tau"),
    [
        ([5.0, 4.0, 4.0, 3.0, 1.0], 2, 4.5),  # tie at 4: count 2 impossible → 1, midway between 5 and 4
        ([5.0, 4.0, 4.0, 3.0, 1.0], 3, 3.5),  # exact count 3
        ([5.0, 4.0, 4.0, 3.0, 1.0], 1, 4.5),
        ([5.0, 4.0, 4.0, 3.0, 1.0], 0, 5.0),  # nothing kept: τ at the largest value
        ([-5.0, 4.0, -3.0, 1.0], 2, 3.5),  # magnitudes
        ([2.0, 2.0, 2.0, 1.0], 2, 2.0),  # every top value tied: count 0
    ],
)
def test_threshold_for_count_hand_worked(values, n_above, tau):
    assert float(threshold_for_count(torch.tensor(values), n_above)) == pytest.approx(tau)


def test_threshold_for_count_gives_exact_count_without_ties():
    values = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    tau = threshold_for_count(values.abs(), 1234)
    assert int((values.abs().double() > tau).sum()) == 1234


def test_threshold_is_at_least_1e_12():
    assert float(threshold_for_count(torch.tensor([1e-13, 0.0, 0.0]), 1)) == pytest.approx(1e-12)


@pytest.mark.parametrize(
    ("values", "n_above", "message"),
    [([1.0, 2.0], 2, "pointless"), ([1.0, 2.0], 5, "pointless"), ([], 0, "empty"), ([1.0, 2.0], -1, "≥ 0"),
     ([float("nan"), 1.0], 1, "NaN")],
)
def test_threshold_for_count_refusals(values, n_above, message):
    with pytest.raises(JumpLoRAError, match=message):
        threshold_for_count(torch.tensor(values), n_above)


@pytest.mark.parametrize(
    ("total", "bounds", "gammas"),
    [
        (10, (2, 8), [0, 0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1, 1, 1]),
        (3, (1, 2), [0, 1, 1]),  # tiny S: S_start = max(1, 0), S_final = max(S_start + 1, 2)
        (4, (1, 3), [0, 0.5, 1, 1]),
        (5, (1, 4), [0, 1 / 3, 2 / 3, 1, 1]),
    ],
)
def test_schedule(total, bounds, gammas):
    assert schedule_bounds(total) == bounds
    assert [jump_schedule(s, total) for s in range(1, total + 1)] == pytest.approx(gammas)


# S = 10 (S_start 2, S_final 8), by hand. SPEC: 0 through S_start, then (s − 2)/6, 1 from S_final. The authors' code
# (`lag=1`): the same one step later, γ_compat(s) = γ(s − 1): 0 through S_start + 1, 1 from S_final + 1.
SPEC_GAMMAS_10 = [0, 0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1, 1, 1]
COMPAT_GAMMAS_10 = [0, 0, 0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1, 1]


def test_schedule_with_the_authors_lag_by_hand():
    assert [jump_schedule(s, 10) for s in range(1, 11)] == pytest.approx(SPEC_GAMMAS_10)
    assert [jump_schedule(s, 10, lag=1) for s in range(1, 11)] == pytest.approx(COMPAT_GAMMAS_10)


@pytest.mark.parametrize("total", range(5, 101))
def test_authors_schedule_is_spec_one_step_later(total):
    s_start, s_final = schedule_bounds(total)
    spec = [0.0] + [jump_schedule(s, total) for s in range(1, total + 1)]  # γ_SPEC(0) = 0
    compat = [jump_schedule(s, total, lag=1) for s in range(1, total + 1)]
    assert compat == [spec[s - 1] for s in range(1, total + 1)]
    assert compat[s_start] == 0.0 and compat[s_start + 1] > 0.0  # γ = 0 through step S_start + 1 (1-based)
    assert compat[s_final - 1] < 1.0 and compat[s_final] == 1.0  # γ = 1 from step S_final + 1


def test_schedule_refuses_a_lag_other_than_0_or_1():
    with pytest.raises(JumpLoRAError, match="lag"):
        jump_schedule(3, 10, lag=2)


def test_schedule_refuses_too_few_steps_and_bad_fractions():
    with pytest.raises(JumpLoRAError, match="at least 3"):
        jump_schedule(1, 2)
    with pytest.raises(JumpLoRAError, match="f_start < f_final"):
        jump_schedule(1, 10, 0.8, 0.8)


def _reference_tau_grad(delta, tau, grad_out, eps, reduction):
    """SPEC §1 written out term by term (the plain formula the fused backward must equal)."""
    def kernel(u):
        return ((u > -0.5) & (u < 0.5)).to(u.dtype)

    plus = -(tau / eps) * kernel((delta - tau) / eps)
    minus = (tau / eps) * kernel((-delta - tau) / eps)
    total = (grad_out * (plus + minus)).sum()
    return total / delta.numel() if reduction == "mean" else total


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("tau", [0.05, 2e-4])  # τ ≥ ε/2: one band test; τ < ε/2: an entry can sit in both kernels
def test_fused_backward_equals_the_reference_on_random_entries(reduction, tau):
    eps = 1e-3
    generator = torch.Generator().manual_seed(0)
    delta = torch.randn(64, 48, generator=generator, dtype=torch.float64) * tau * 1.5
    delta[:4, :4] = torch.tensor([tau, -tau, tau + eps / 2, -tau - eps / 2], dtype=torch.float64)  # band edges
    grad_out = torch.randn(64, 48, generator=generator, dtype=torch.float64)
    delta.requires_grad_(True)
    threshold = torch.tensor(tau, dtype=torch.float64, requires_grad=True)
    symmetric_jump(delta, threshold, eps, reduction).backward(grad_out)
    expected = _reference_tau_grad(delta.detach(), torch.tensor(tau, dtype=torch.float64), grad_out, eps, reduction)
    assert float(expected) != 0.0
    assert float(threshold.grad) == pytest.approx(float(expected), rel=1e-9)  # fp64 in, fp64 sums
    assert torch.equal(delta.grad, grad_out * (delta.detach().abs() > tau))
