"""The λ of a stage trained as one stack (`continual.run_task_group`, `training.train_stack`) against the same λ
trained one by one, today's `run_task` (tiny preset, 2 tasks, 3 steps a task): on a CPU the same update, thresholds,
loss curves, memory and dev accuracies, bit for bit; the same error for a λ that diverges; the model's weights are
the start's afterwards, bitwise. A GPU's one forward over the K copies: the same up to the order of float
operations."""

import copy
import math
import sys
from pathlib import Path

import pytest
import torch

from jumplora.config import RunConfig
from jumplora.continual import ContinualState, prepare, run_alone, run_continual, run_task_group, stacks
from jumplora.continual.workspace import task_seed, training_examples
from jumplora.errors import DivergedError
from jumplora.methods import METHODS, make_regulariser
from jumplora.training import train_stack

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


def equal(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> bool:
    return ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


def tensors_close(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> bool:
    """Each tensor within TOLERANCE of the other's norm."""
    return ours.keys() == theirs.keys() and all(
        float((ours[name] - theirs[name]).norm()) <= TOLERANCE * float(theirs[name].norm()) for name in ours)


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
@pytest.mark.parametrize(("method", "settings", "lams"), [
    ("jumplora+ella", {}, (1e3, DIVERGES, 3e4, 1e6)),  # τ by count per λ
    ("ella", {"model_dropout": 0.1}, (1e3, DIVERGES, 3e4)),  # the model's dropout and LoRA's, tiled per λ
    ("l2", {"lambdas": [0.0, 1.0, 1.0, 1.0]}, (1.0, DIVERGES, 1e2)),  # a plugin's regulariser (no paper λ table)
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
        # on a CPU each copy runs the operations of its λ alone (`training.train_stack`): bit-equal
        assert mine.ce == reference.ce and mine.penalty == reference.penalty, lam
        assert mine.thresholds == reference.thresholds, lam
        assert equal(mine.update, reference.update) and equal(ours.memory, theirs.memory), lam
        assert mine.dev == reference.dev and mine.dev_flags == reference.dev_flags, lam
    penalties = [state.records[1].penalty for state in stacked if isinstance(state, ContinualState)]
    assert all(curve[0] == 0.0 and curve[-1] > 0.0 for curve in penalties)  # λ·P acted, B = 0 at step 1
    assert len({tuple(curve) for curve in penalties}) == len(penalties)  # each λ its own
    if method == "ella":  # a GPU's way, one forward over the K copies: equal up to the order of float operations
        name, examples = training_examples(ws, 1)
        kept = [lam for lam in lams if lam != DIVERGES]
        records, _ = train_stack(ws.model, examples, task_name=name, task_seed=task_seed(ws.config.seed, 1), lams=kept,
                                 regularisers=[make_regulariser(ws.config, copy.deepcopy(state.memory)) for _ in kept],
                                 config=ws.config, pad_id=ws.tokenizer.pad_token_id, device=ws.device, progress=False,
                                 one_by_one=False)
        for record, theirs in zip(records, [alone[lams.index(lam)] for lam in kept], strict=True):
            assert close(record.ce, theirs.records[1].ce) and close(record.penalty, theirs.records[1].penalty)
            assert tensors_close(record.update, theirs.records[1].update)
