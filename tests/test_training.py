"""K λ of one start trained in one `training.train_task` (K copies of the adapter in its layers) against each λ alone
(K = 1): copy by copy, the same curves, thresholds and updates bit for bit on a CPU, for every method with a per-task
λ and a LoRA-family adapter (ella, jumplora+ella, the example plugins l1 and l2), a λ whose ΔW is not finite failing
alone; one forward over the K copies, the same within `TOLERANCE` (docs/DECISIONS.md: float operations summed in
another order). Then the loop's λ group (`continual.run_task_group`) on the tiny preset against each λ's `run_task`
alone (`alone`): the same records, memory, dev (and test) rows, the same error for the λ that diverges, the start
weights back bitwise; for a stacking method in one training, for a whole-model one (EWC) one λ after another."""

import copy
import math
import random
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from jumplora.config import RunConfig
from jumplora.continual import ContinualState, prepare, run_continual, run_task, run_task_group
from jumplora.data.encode import Encoded
from jumplora.errors import DivergedError
from jumplora.methods import METHODS, make_regulariser, stacks
from jumplora.training import Trained, train_task
from tests.conftest import make_t5

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DIVERGES = math.inf  # λ·P = ∞ · 0 at step 1: ΔW not finite when τ is set (S_start)
# one forward against copy by copy, max abs differences (measured: CE 7.2e-7, λ·P 4.5e-8, τ 0, updates 2.0e-8;
# docs/DECISIONS.md)
TOLERANCE = {"ce": 1e-5, "penalty": 1e-6, "thresholds": 1e-6, "update": 1e-6}
BATCH, STEPS = 2, 10  # S_start = 2, S_final = 8: dense steps, the ramp of γ, then γ = 1


@pytest.fixture
def plugins(monkeypatch):
    """The example plugins' `l1` and `l2`, registered in this process for the test only."""
    METHODS.load_plugins()
    for plugin, module in (("l1_plugin", "jumplora_l1.method"), ("l2_plugin", "jumplora_l2.method")):
        sys.path.insert(0, str(EXAMPLES / plugin))
        try:
            method = __import__(module, fromlist=["METHOD"]).METHOD
        finally:
            sys.path.remove(str(EXAMPLES / plugin))
        monkeypatch.setitem(METHODS.specs, method.name, method)


def examples(n: int) -> list[Encoded]:
    rng = random.Random(2)
    return [Encoded(tuple(rng.randrange(2, 50) for _ in range(rng.randrange(4, 9))) + (1,),
                    tuple(rng.randrange(2, 50) for _ in range(rng.randrange(1, 3))) + (1,), "x") for _ in range(n)]


def model_with_dropout(p: float):
    """A frozen random T5 whose own dropouts (embeddings, attention, feed-forward) draw with probability `p`."""
    model = make_t5().requires_grad_(False)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
    model.config.dropout_rate = p
    return model


def train(model, config: RunConfig, lams, one_forward: bool | None = False, device: str = "cpu"):
    """`train_task` of `lams` on a random ELLA W_past (the penalty acts from step 1): each λ's outcome."""
    generator = torch.Generator().manual_seed(1)
    past = {f"{name}": (0.01 * torch.randn(module.weight.shape, generator=generator)).to(device)
            for name, module in model.named_modules() if name.endswith((".q", ".v"))}
    regularisers = [make_regulariser(config, copy.deepcopy(past)) for _ in lams]
    return train_task(model, examples(STEPS * BATCH), task_name="two", task_seed=2, lams=lams,
                      regularisers=regularisers, config=config, pad_id=0, device=torch.device(device), progress=False,
                      one_forward=one_forward).outcomes


def same(ours, theirs) -> bool:
    """Bit for bit: curves, thresholds, updates; an error's line."""
    if isinstance(theirs, DivergedError):
        return isinstance(ours, DivergedError) and str(ours) == str(theirs)
    return (ours.ce == theirs.ce and ours.penalty == theirs.penalty and ours.thresholds == theirs.thresholds
            and ours.update.keys() == theirs.update.keys()
            and all(torch.equal(ours.update[name], theirs.update[name]) for name in ours.update))


def max_differences(ours, theirs) -> dict[str, float]:
    return {"ce": max(abs(a - b) for a, b in zip(ours.ce, theirs.ce, strict=True)),
            "penalty": max(abs(a - b) for a, b in zip(ours.penalty, theirs.penalty, strict=True)),
            "thresholds": max([abs(ours.thresholds[g] - t) for g, t in theirs.thresholds.items()], default=0.0),
            "update": max(float((ours.update[name] - theirs.update[name]).abs().max()) for name in theirs.update)}


@pytest.mark.parametrize(("method", "settings", "lams"), [
    ("ella", {"lora_dropout": 0.1}, (1e3, 1e5)),  # the model's dropout and LoRA's: each copy its λ alone's masks
    ("jumplora+ella", {}, (1e3, DIVERGES, 3e4)),  # τ by count per copy; a copy that fails stops alone
    ("jumplora+ella", {"jump_dropout": 0.1, "threshold": "per_block"}, (1e3, 1e5)),  # W's output + dropout(x) ΔW^T
    ("l1", {}, (1e-3, 1e-2)),  # the plugins' regularisers, through each copy's view
    ("l2", {}, (1.0, 1e2)),
])
def test_k_lambdas_train_as_each_alone_copy_by_copy_and_within_tolerance_in_one_forward(plugins, method, settings,
                                                                                        lams):
    config = RunConfig(method=method, batch_size=BATCH, rank=4, device="cpu", **settings)
    model = model_with_dropout(0.1 if method == "ella" else 0.0)
    start = copy.deepcopy(model.state_dict())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend on a busy machine
    try:
        alone = [train(model, config, [lam])[0] for lam in lams]
        copies = train(model, config, lams)
        one_forward = train(model, config, lams, one_forward=True)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(value, start[name]) for name, value in model.state_dict().items())  # not merged
    assert all(same(ours, theirs) for ours, theirs in zip(copies, alone, strict=True)), method
    for lam, ours, theirs in zip(lams, one_forward, alone, strict=True):
        if lam == DIVERGES:
            assert same(ours, theirs)
            continue
        assert theirs.penalty[-1] > 0.0 and len(theirs.ce) == STEPS
        differences = max_differences(ours, theirs)
        assert all(differences[key] <= TOLERANCE[key] for key in TOLERANCE), (method, lam, differences)


@pytest.mark.gpu
def test_on_a_gpu_k_lambdas_train_in_one_forward_by_default_within_tolerance_of_each_alone():
    """The GPU branch: one forward over the K copies (the default on CUDA, fused AdamW) against each λ alone there."""
    config = RunConfig(method="jumplora+ella", batch_size=BATCH, rank=4, device="cuda")
    model = model_with_dropout(0.0).to("cuda")
    lams = (1e3, 3e4)
    alone = [train(model, config, [lam], device="cuda")[0] for lam in lams]
    for ours, theirs in zip(train(model, config, lams, one_forward=None, device="cuda"), alone, strict=True):
        assert len(ours.ce) == len(theirs.ce) == STEPS and theirs.penalty[-1] > 0.0
        differences = max_differences(ours, theirs)
        assert all(differences[key] <= TOLERANCE[key] for key in TOLERANCE), differences


def alone(ws, state: ContinualState, t: int, lam: float, test: bool = False):
    """λ trained alone, as a run of that λ trains it: `run_task` on a deep copy of `state` with `ws.lambdas[t] = λ`;
    afterwards the model's start weights and `ws.lambdas` put back. Its state (or DivergedError) and the model's
    weights after it."""
    start, kept = copy.deepcopy(ws.model.state_dict()), list(ws.lambdas)
    ws.lambdas[t] = lam
    mine = copy.deepcopy(state)
    try:
        run_task(ws, mine, t, progress=False, test=test)
        return mine, copy.deepcopy(ws.model.state_dict())
    except DivergedError as error:
        return error, None
    finally:
        ws.lambdas[:] = kept
        ws.model.load_state_dict(start)


def check_group(ws, state: ContinualState, lams: tuple[float, ...], test: bool) -> list[ContinualState]:
    """`run_task_group` of task 2 against each λ `alone`: the start weights and λ back after it; per λ the same
    record, memory, dev and test rows (the same error for a λ that diverges), and `keep` sees the model with that λ's
    weights, as alone; the group's states, less the diverged."""
    start = copy.deepcopy(ws.model.state_dict())
    kept_lambdas, seen = list(ws.lambdas), {}
    grouped = run_task_group(ws, state, 1, lams, progress=False, test=test,
                             keep=lambda k, mine: seen.setdefault(k, (mine, copy.deepcopy(ws.model.state_dict()))))
    assert all(torch.equal(value, start[name]) for name, value in ws.model.state_dict().items())
    assert ws.lambdas == kept_lambdas and len(state.records) == 1
    references = [alone(ws, state, 1, lam, test) for lam in lams]
    assert sorted(seen) == [k for k, lam in enumerate(lams) if lam != DIVERGES]
    for k, (lam, ours, (theirs, weights)) in enumerate(zip(lams, grouped, references, strict=True)):
        if lam == DIVERGES:  # stops alone, with the line it gives alone
            assert isinstance(ours, DivergedError) and str(ours) == str(theirs)
            continue
        assert isinstance(ours, ContinualState) and ours.records[0] is state.records[0] and seen[k][0] is ours
        assert all(torch.equal(value, weights[name]) for name, value in seen[k][1].items()), lam
        mine, reference = ours.records[1], theirs.records[1]
        assert mine.lam == reference.lam == lam
        assert same(mine, reference), lam
        assert ours.memory.keys() == theirs.memory.keys()
        assert all(torch.equal(ours.memory[name], theirs.memory[name]) for name in ours.memory), lam
        assert mine.dev == reference.dev and mine.dev_flags == reference.dev_flags, lam
        assert mine.test == reference.test and (mine.test_flags == reference.test_flags), lam
        assert (len(mine.test) == 2) == test, lam  # tested: both seen tasks
    return [outcome for outcome in grouped if isinstance(outcome, ContinualState)]


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_a_lambda_group_of_the_loop_trains_each_lambda_as_it_trains_alone(tiny_cache):
    lams = (1e3, DIVERGES, 3e4)
    assert stacks("jumplora+ella") and not stacks("ewc")
    ws = prepare(RunConfig(order=1, method="jumplora+ella", max_tasks=2, max_train_per_task=96, max_eval_per_task=16),
                 tiny_cache, progress=False)
    state = run_continual(ws, ContinualState(), progress=False, stop=1, test=False)  # task 1: no penalty yet
    grouped = check_group(ws, state, lams, test=False)
    penalties = [state.records[1].penalty for state in grouped]
    assert all(curve[0] == 0.0 and curve[-1] > 0.0 for curve in penalties)  # λ·P acted, B = 0 at step 1
    assert len({tuple(curve) for curve in penalties}) == len(penalties)  # each λ its own


@pytest.mark.slow  # EWC's Fisher: a backward per example, five times
def test_a_whole_model_method_trains_its_lambda_group_one_after_another_as_each_alone(tiny_cache):
    """EWC trains every weight (no copies): its λ one after another on the group's path, each from the start weights,
    with its test row when asked."""
    ws = prepare(RunConfig(order=1, method="ewc", max_tasks=2, max_train_per_task=65, max_eval_per_task=8),
                 tiny_cache, progress=False)
    state = run_continual(ws, ContinualState(), progress=False, stop=1, test=False)
    grouped = check_group(ws, state, (10.0, 1e4), test=True)
    assert grouped[0].records[1].update.keys() == grouped[1].records[1].update.keys()
    assert not all(torch.equal(grouped[0].records[1].update[name], grouped[1].records[1].update[name])
                   for name in grouped[0].records[1].update)  # each λ its own training


class Tied(nn.Module):
    """An embedding and a head sharing one weight: the state dict names it twice."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(4, 3), nn.Linear(3, 4, bias=False)
        self.head.weight = self.embed.weight


def test_a_whole_model_method_keeps_a_tied_weight_once_to_put_back():
    from jumplora.continual.loop import start_weights

    ws = type("Ws", (), {"config": RunConfig(method="seqft"), "model": Tied()})()
    assert len(ws.model.state_dict()) == 2
    (weight, kept), = start_weights(ws, whole_model=True)
    assert weight.data_ptr() == ws.model.embed.weight.data_ptr() and torch.equal(kept, weight)


@pytest.mark.parametrize(("method", "copied"), [("jumplora+ella", False), ("ewc", True)])
def test_a_lambda_stopped_before_its_merge_is_put_back_only_where_a_weight_changed(monkeypatch, method, copied):
    """An adapter's λ that diverged before its merge changed no weight: nothing is copied back; a whole-model
    training changed every weight: they are."""
    import jumplora.continual.loop as loop

    weight = torch.zeros(2)
    monkeypatch.setattr(loop, "start_weights", lambda ws, whole_model: [(weight, torch.ones(2))])
    error = DivergedError("diverged")
    monkeypatch.setattr(loop, "train_copies", lambda *args: Trained([error], adapter=None))
    ws = type("Ws", (), {"config": RunConfig(method=method)})()
    assert loop.run_task_group(ws, ContinualState(), 1, [1.0], progress=False) == [error]
    assert torch.equal(weight, torch.full((2,), float(copied)))
