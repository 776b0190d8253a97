"""The three numerical pieces of JumpLoRA (SPEC §1): the symmetric JumpReLU, τ by count, and the γ schedule."""

from __future__ import annotations

import math

import torch

from jumplora.config import MIN_STEPS, STEPS_RULE
from jumplora.errors import DivergedError, JumpLoRAError

MIN_THRESHOLD = 1e-12


def _kernel_difference(delta: torch.Tensor, grad_out: torch.Tensor, tau: torch.Tensor, eps: float) -> torch.Tensor:
    """Σ g·K((−ΔW − τ)/ε) − Σ g·K((ΔW − τ)/ε) in fp32, with K(u) = 1 for −1/2 < u < 1/2, else 0 (SPEC §1).

    Per entry, with a = |ΔW|: for ΔW > 0 the first kernel reads (a + τ)/ε and the second (a − τ)/ε; for ΔW < 0 the
    other way round, and both read exactly those numbers (ΔW + τ = −(a − τ) in floating point). So the term is
    −sign(ΔW)·g·(K((a − τ)/ε) − 1[(a + τ)/ε < 1/2]): one band test ||ΔW| − τ| < ε/2, and a correction that is zero
    whenever τ ≥ ε/2 (where the two kernels never overlap, as after τ by count) and cancels the band where both
    kernels fire. The sum is one dot product over ΔW, and τ is never read on the host (on a GPU that would be a sync
    in every backward).
    """
    accumulate = torch.promote_types(grad_out.dtype, torch.float32)
    magnitude = delta.abs()
    band = magnitude.sub(tau).div_(eps).abs_() < 0.5
    both = magnitude.add_(tau).div_(eps) < 0.5  # in place: `magnitude` is not needed after this
    in_band = torch.where(band, grad_out, 0.0).sub_(torch.where(both, grad_out, 0.0)).reshape(-1).to(accumulate)
    return -in_band.dot(delta.sign().reshape(-1).to(accumulate))


class _SymmetricJump(torch.autograd.Function):
    """ΔW_jump = JumpReLU_τ(ΔW) − JumpReLU_τ(−ΔW) = ΔW · 1[|ΔW| > τ], with straight-through gradients.

    d/dΔW: the mask (H(ΔW − τ) + H(−ΔW − τ)).
    d/dτ:  branch +ΔW: −(τ/ε) K((ΔW − τ)/ε) · g;  branch −ΔW (output −JumpReLU_τ(−ΔW)): +(τ/ε) K((−ΔW − τ)/ε) · g;
           each branch reduced over the entries of this ΔW (mean by default), then added.

    The forward's mask is kept (1 byte an entry); both kernels come from one band test (`_kernel_difference`).
    """

    @staticmethod
    def forward(ctx, delta: torch.Tensor, threshold: torch.Tensor, bandwidth: float, reduction: str):
        tau = threshold.to(delta.dtype)
        mask = delta.abs() > tau
        ctx.save_for_backward(delta, threshold, mask)
        ctx.bandwidth, ctx.reduction, ctx.numel = bandwidth, reduction, delta.numel()
        return delta * mask

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        delta, threshold, mask = ctx.saved_tensors
        grad_delta = grad_tau = None
        if ctx.needs_input_grad[0]:
            grad_delta = grad_out * mask
        if ctx.needs_input_grad[1]:
            eps = ctx.bandwidth
            tau = threshold.to(delta.dtype)
            difference = _kernel_difference(delta, grad_out, tau, eps)
            total = difference * (tau / eps).to(difference.dtype)
            if ctx.reduction == "mean":
                total = total / ctx.numel
            grad_tau = total.to(threshold.dtype).reshape(threshold.shape)
        return grad_delta, grad_tau, None, None


def symmetric_jump(delta: torch.Tensor, threshold: torch.Tensor, bandwidth: float,
                   reduction: str = "mean") -> torch.Tensor:
    """ΔW_jump = JumpReLU_τ(ΔW) − JumpReLU_τ(−ΔW) with the straight-through estimator of SPEC §1.

    `threshold` is a scalar tensor τ > 0 (gradients reach it, e.g. from a `log τ` parameter); `bandwidth` is ε > 0;
    `reduction` ("mean" or "sum") says how each branch's τ-gradient is reduced over the entries of `delta`.
    """
    if bandwidth <= 0:
        raise JumpLoRAError(f"bandwidth must be positive, got {bandwidth}: pass e.g. --bandwidth 0.001")
    if reduction not in ("mean", "sum"):
        raise JumpLoRAError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if threshold.numel() != 1:
        raise JumpLoRAError(f"threshold must be a scalar tensor, got shape {tuple(threshold.shape)}")
    return _SymmetricJump.apply(delta, threshold, float(bandwidth), reduction)


def threshold_for_count(abs_values: torch.Tensor, n_above: int) -> torch.Tensor:
    """τ such that the count of entries strictly above τ is the largest achievable count ≤ `n_above` (SPEC §1).

    τ lies midway between the two neighbouring distinct values around the cut (float64 arithmetic), and is at least
    1e-12. If every one of the top `n_above + 1` values is tied, no positive count ≤ `n_above` is achievable: τ is
    then the largest value itself (count 0). Refuses empty input, non-finite values, a negative count, and a count
    that is not below the number of entries (sparsifying would keep everything). Returns a float64 scalar tensor.
    """
    flat = abs_values.detach().reshape(-1)
    if flat.numel() == 0:
        raise JumpLoRAError("cannot set a threshold from an empty set of values")
    if n_above < 0:
        raise JumpLoRAError(f"the number of entries to keep must be ≥ 0, got {n_above}")
    if n_above >= flat.numel():
        raise JumpLoRAError(
            f"the threshold group has {flat.numel()} entries but {n_above} LoRA parameters: sparsification is "
            "pointless; adapt larger modules or use a smaller rank (d_in·d_out must exceed r·(d_in+d_out))"
        )
    if not torch.isfinite(flat).all():
        raise DivergedError("ΔW holds NaN or infinite values: training diverged before the threshold was set")
    top = torch.topk(flat.to(torch.float64).abs(), n_above + 1, sorted=True).values  # v_1 ≥ … ≥ v_{n+1}
    # A count k (1 ≤ k ≤ n) is achievable iff v_k > v_{k+1}; take the largest such k.
    drops = torch.nonzero(top[:-1] > top[1:]).reshape(-1)
    if drops.numel() == 0:
        return torch.clamp(top[0], min=MIN_THRESHOLD)
    k = int(drops[-1])  # 0-based index of v_k
    return torch.clamp((top[k] + top[k + 1]) / 2, min=MIN_THRESHOLD)


def schedule_bounds(total_steps: int, start_frac: float = 0.2, final_frac: float = 0.8) -> tuple[int, int]:
    """(S_start, S_final) for a task of `total_steps` optimizer steps (SPEC §1); refuses fewer than `MIN_STEPS`."""
    if not 0.0 <= start_frac < final_frac <= 1.0:
        raise JumpLoRAError(
            f"need 0 ≤ f_start < f_final ≤ 1, got f_start={start_frac}, f_final={final_frac}: "
            "pass e.g. --jump-start 0.2 --jump-final 0.8"
        )
    if total_steps < MIN_STEPS:
        raise JumpLoRAError(f"{STEPS_RULE}, got {total_steps}")
    s_start = max(1, math.floor(start_frac * total_steps))
    s_final = max(s_start + 1, math.floor(final_frac * total_steps))
    return s_start, s_final


def jump_schedule(step: int, total_steps: int, start_frac: float = 0.2, final_frac: float = 0.8,
                  lag: int = 0) -> float:
    """γ for optimizer step `step` (1-based): 0 up to S_start, then linear to 1 at S_final, then 1 (SPEC §1).

    `lag = 1` is the authors' code (`--authors-compat`): their γ lags one step, γ_compat(s) = γ(s − 1) with γ(0) = 0,
    so γ = 0 through step S_start + 1 and γ = 1 from step S_final + 1.
    """
    if lag not in (0, 1):
        raise JumpLoRAError(f"the schedule's lag must be 0 (SPEC) or 1 (the authors' code), got {lag}")
    s_start, s_final = schedule_bounds(total_steps, start_frac, final_frac)
    step -= lag
    if step <= s_start:
        return 0.0
    return min(1.0, (step - s_start) / (s_final - s_start))
