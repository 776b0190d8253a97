"""log τ takes a zero gradient on the dense steps 1..S_start (γ = 0), as in the authors' code where the jump branch is
in the graph: AdamW counts those steps, so its bias correction at τ's first real step is that of step S_start + 1,
not of step 1. Hand-worked on a scalar, then checked on `train_task`."""

from __future__ import annotations

import math
import random

import pytest
import torch

from jumplora.config import RunConfig
from jumplora.data.encode import Encoded
from jumplora.training import train_task
from tests.conftest import make_t5

LR = 0.01
BETAS = (0.9, 0.999)
EPS = 1e-8
BATCH, N_TRAIN = 2, 20  # 10 steps: S_start = 2, S_final = 8, γ(3) = 1/6


def counted_update(g: float, step: int) -> float:
    """The AdamW update (wd 0) at `step` whose only non-zero gradient is this last one, g, after step − 1 zero
    gradients: m = (1 − β1) g, v = (1 − β2) g², m̂ = m / (1 − β1^step), v̂ = v / (1 − β2^step)."""
    m_hat = (1 - BETAS[0]) * g / (1 - BETAS[0] ** step)
    v_hat = (1 - BETAS[1]) * g * g / (1 - BETAS[1] ** step)
    return LR * m_hat / (math.sqrt(v_hat) + EPS)


def adam_scalar(grads: list[float | None]) -> float:
    """Run torch's AdamW on a scalar log τ = 0 with these gradients (None: .grad left None); return its value."""
    log_tau = torch.nn.Parameter(torch.zeros((), dtype=torch.float32))
    optimizer = torch.optim.AdamW([log_tau], lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    for g in grads:
        optimizer.zero_grad(set_to_none=True)
        if g is not None:
            log_tau.grad = torch.tensor(g, dtype=torch.float32)
        optimizer.step()
    return float(log_tau.detach())


def test_zero_gradients_are_counted_by_adamw_by_hand():
    g = 0.25
    # by hand: m3 = 0.1 g, v3 = 0.001 g², m̂ = 0.1 g / 0.271, v̂ = 0.001 g² / 0.002997001 → update ≈ 0.6388 lr·sign(g)
    by_hand = LR * (0.1 * g / 0.271) / (math.sqrt(0.001 * g * g / 0.002997001) + EPS)
    assert by_hand == pytest.approx(0.63881 * LR, rel=1e-4)
    assert counted_update(g, 3) == pytest.approx(by_hand, rel=1e-9)
    # skipped steps: the first Adam step, m̂ = g, v̂ = g², update = lr·g / (|g| + eps) ≈ lr·sign(g)
    assert counted_update(g, 1) == pytest.approx(LR * g / (abs(g) + EPS), rel=1e-12)
    assert adam_scalar([0.0, 0.0, g]) == pytest.approx(-by_hand, rel=1e-5)
    assert adam_scalar([None, None, g]) == pytest.approx(-LR, rel=1e-5)


class RecordingAdamW(torch.optim.AdamW):
    """AdamW that records, at every step, log τ's gradient (as the optimizer sees it, after clipping) and its value
    before and after the step."""

    records: list[dict] = []

    def step(self, closure=None):
        log_tau = next(p for group in self.param_groups for p in group["params"] if p.dim() == 0)
        before = float(log_tau.detach())
        grad = None if log_tau.grad is None else log_tau.grad.clone()
        result = super().step(closure)
        RecordingAdamW.records.append({"grad": grad, "before": before, "after": float(log_tau.detach()),
                                       "adam_step": float(self.state[log_tau]["step"]) if self.state[log_tau] else 0})
        return result


def examples(n: int, seed: int) -> list[Encoded]:
    rng = random.Random(seed)
    return [Encoded(tuple(rng.randrange(2, 50) for _ in range(rng.randrange(4, 9))) + (1,),
                    tuple(rng.randrange(2, 50) for _ in range(rng.randrange(1, 3))) + (1,), "x") for _ in range(n)]


def test_train_task_counts_the_dense_steps_for_log_tau(monkeypatch):
    monkeypatch.setattr(torch.optim, "AdamW", RecordingAdamW)
    RecordingAdamW.records = []
    config = RunConfig(method="jumplora+inclora", batch_size=BATCH, lr=LR, rank=4, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend on a busy machine
    try:
        train_task(make_t5(), examples(N_TRAIN, 1), task_name="one", task_seed=1, lams=[0.0], regularisers=[None],
                   config=config, pad_id=0, device=torch.device("cpu"), progress=False)
    finally:
        torch.set_num_threads(threads)
    records = RecordingAdamW.records
    assert len(records) == 10
    for record in records[:2]:  # steps 1..S_start: γ = 0, a zero gradient (not None), so AdamW takes the step
        assert record["grad"] is not None and float(record["grad"]) == 0.0
        assert record["after"] == record["before"]  # zero moments: no move
    third = records[2]  # first step with γ > 0; τ was set by count after step 2 (so `before` is the new log τ)
    assert third["adam_step"] == 3
    g = float(third["grad"])
    assert g != 0.0
    moved = third["after"] - third["before"]
    assert moved == pytest.approx(-counted_update(g, 3), rel=1e-3)
    assert abs(moved) < 0.7 * counted_update(abs(g), 1)  # well short of AdamW's first step, lr·|g| / (|g| + eps)
