"""The λ of a stage trained as one stack (`continual.run_task_group`, `training.train_stack`) against the same λ
trained one by one, today's `run_task` (tiny preset, 2 tasks, 3 steps a task): the same update, thresholds, loss
curves and memory up to the order of float operations, the same dev accuracies, the same error for a λ that
diverges; the model's weights are the start's afterwards, bitwise."""

import copy
import math
import sys
from pathlib import Path

import pytest
import torch

from jumplora.config import RunConfig
from jumplora.continual import ContinualState, DivergedError, prepare, run_alone, run_continual, run_task_group, stacks
from jumplora.methods import METHODS
from jumplora.training import clip_each_copy_

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "l2_plugin"
TOLERANCE = 1e-5  # relative: float operations in another order
DIVERGES = math.inf  # λ·P = ∞ · 0 at step 1: not finite


@pytest.fixture
def l2_method(monkeypatch):
    """The example plugin's `l2`, registered in this process for the test only."""
    sys.path.insert(0, str(PLUGIN))
    try:
        from jumplora_l2.method import METHOD
    finally:
        sys.path.remove(str(PLUGIN))
    METHODS.load_plugins()
    monkeypatch.setitem(METHODS.specs, METHOD.name, METHOD)
    return METHOD.name


def close(ours: list[float] | dict[str, float], theirs: list[float] | dict[str, float]) -> bool:
    if isinstance(ours, dict):
        return ours.keys() == theirs.keys() and close(list(ours.values()), list(theirs.values()))
    return len(ours) == len(theirs) and all(math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-12)
                                            for a, b in zip(ours, theirs, strict=True))


def tensors_close(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> bool:
    """Each tensor within TOLERANCE of the other's norm."""
    return ours.keys() == theirs.keys() and all(
        float((ours[name] - theirs[name]).norm()) <= TOLERANCE * float(theirs[name].norm()) for name in ours)


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
@pytest.mark.parametrize(("method", "settings", "lams"), [
    ("jumplora+ella", {}, (1e3, DIVERGES, 3e4, 1e6)),  # τ by count per λ
    ("ella", {"model_dropout": 0.1}, (1e3, DIVERGES, 3e4)),  # the model's dropout and LoRA's, tiled per λ
    ("l2", {}, (1.0, DIVERGES, 1e2)),  # a plugin's regulariser
])
def test_a_stack_trains_each_lambda_as_it_trains_alone(tiny_cache, request, method, settings, lams):
    if method == "l2":
        request.getfixturevalue("l2_method")
    assert stacks(method)
    ws = prepare(RunConfig(order=1, method=method, max_tasks=2, max_train_per_task=96, max_eval_per_task=16,
                           **settings), tiny_cache, progress=False)
    state = run_continual(ws, ContinualState(), progress=False, stop=1, test=False)  # task 1: no penalty yet
    start = copy.deepcopy(ws.model.state_dict())
    kept_lambdas = list(ws.lambdas)

    stacked = run_task_group(ws, state, 1, lams, progress=False)
    assert all(torch.equal(value, start[name]) for name, value in ws.model.state_dict().items())
    assert ws.lambdas == kept_lambdas and len(state.records) == 1
    alone = [run_alone(ws, state, 1, lam, progress=False) for lam in lams]

    for lam, ours, theirs in zip(lams, stacked, alone, strict=True):
        if lam == DIVERGES:  # stops alone, with the line it gives unstacked
            assert isinstance(ours, DivergedError) and isinstance(theirs, DivergedError)
            assert str(ours) == str(theirs)
            continue
        assert isinstance(ours, ContinualState) and ours.records[0] is state.records[0]
        mine, reference = ours.records[1], theirs.records[1]
        assert mine.lam == reference.lam == lam and mine.test == reference.test == []
        assert close(mine.ce, reference.ce) and close(mine.penalty, reference.penalty), lam
        assert close(mine.thresholds, reference.thresholds), lam
        assert tensors_close(mine.update, reference.update), lam
        assert tensors_close(ours.memory, theirs.memory), lam
        assert mine.dev == reference.dev, lam
    penalties = [state.records[1].penalty for state in stacked if isinstance(state, ContinualState)]
    assert all(curve[0] == 0.0 and curve[-1] > 0.0 for curve in penalties)  # λ·P acted, B = 0 at step 1
    assert len({tuple(curve) for curve in penalties}) == len(penalties)  # each λ its own


def test_each_copy_is_clipped_by_its_own_norm_and_a_non_finite_copy_touches_no_other():
    generator = torch.Generator().manual_seed(1)
    params = [torch.zeros(3, 4, 5), torch.zeros(3)]
    grads = [torch.randn(3, 4, 5, generator=generator) * 3, torch.randn(3, generator=generator)]
    grads[0][1, 0, 0] = math.nan
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    clip_each_copy_(params, 1.0)
    for k in (0, 2):
        alone = [torch.zeros_like(g[k]) for g in grads]
        for p, g in zip(alone, grads, strict=True):
            p.grad = g[k].clone()
        torch.nn.utils.clip_grad_norm_(alone, 1.0)
        for p, expected in zip(params, alone, strict=True):
            torch.testing.assert_close(p.grad[k], expected.grad, rtol=0, atol=0)  # the same computation
    assert all(p.grad[1].isnan().all() for p in params)  # its own clipping, as alone: NaN, and only there
