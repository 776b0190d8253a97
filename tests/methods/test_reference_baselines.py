"""The reference baselines (SPEC §7) through the one loop on the tiny preset: EWC / SeqFT (every weight trains),
O-LoRA (orthogonal lora_A), MTL (one training on the union). Small caps: a few optimizer steps per task."""

import copy
import dataclasses

import pytest
import torch

from jumplora import checkpoints
from jumplora.config import RunConfig
from jumplora.continual import prepare, run_continual, run_task, summarise
from jumplora.methods.olora import orthogonality_loss


@pytest.fixture(autouse=True)
def _one_thread():
    """Full fine-tuning of the tiny model (and its per-example Fisher) is fastest on one thread: with two on a busy
    2-core machine the threads wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def workspace(tiny_cache, method, **fields):
    fisher = {"ewc_fisher_samples": 16} if method == "ewc" else {}  # EWC's own setting: a small Fisher sample
    config = RunConfig.of({"order": 1, "method": method, "max_tasks": 2, "max_train_per_task": 96,
                           "max_eval_per_task": 8, "device": "cpu", **fisher, **fields})
    return prepare(config, tiny_cache, progress=False)


def test_ewc_with_lambda_zero_is_seqft_and_remembers_a_fisher_per_parameter(tiny_cache):
    ewc = workspace(tiny_cache, "ewc", lambdas=[0.0] * 4)
    ewc_state = run_continual(ewc, progress=False)
    seqft = workspace(tiny_cache, "seqft")
    seqft_state = run_continual(seqft, progress=False)
    runs = ((ewc, ewc_state), (seqft, seqft_state))
    matrices = [summarise(ws, state, None).accuracy_matrix for ws, state in runs]
    assert matrices[0] == matrices[1]
    assert [r.ce for r in ewc_state.records] == [r.ce for r in seqft_state.records]
    for (name, a), (_, b) in zip(ewc.model.named_parameters(), seqft.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    # every weight trained (not only q and v), the model is frozen again, and EWC kept F for every parameter
    assert set(ewc_state.memory) == {name for name, _ in ewc.model.named_parameters()}
    fisher = ewc_state.memory.values()
    assert all((f >= 0).all() for f in fisher) and any(f.sum() > 0 for f in fisher)
    assert not any(p.requires_grad for p in ewc.model.parameters())
    assert seqft_state.memory == {}
    # the record's update is the change of the q / v weights, as for the adapters
    assert all(name.endswith((".q", ".v")) for name in ewc_state.records[0].update)


def test_a_large_ewc_lambda_holds_the_first_tasks_most_important_weights(tiny_cache):
    # Batches of 8: 20 AdamW steps a task. Adam moves every weight ~lr a step, the held ones included (their first
    # step is the same as the free ones', the penalty's gradient being 0 at θ*), so with 5 steps (batches of 32) held
    # and free differed by 0.55× only; with 20 the held weights moved 0.05–0.06× as far on two builds of the preset.
    ws = workspace(tiny_cache, "ewc", lambdas=[0.0, 0.0, 0.0, 0.0], max_train_per_task=160, ewc_fisher_samples=64,
                   batch_size=8)
    state = run_continual(ws, progress=False, stop=1)  # task 1 and its Fisher
    after_first = {name: p.detach().clone() for name, p in ws.model.named_parameters()}
    fisher = torch.cat([state.memory[name].reshape(-1) for name in after_first])
    important = fisher >= torch.quantile(fisher, 0.99)  # the top 1 % of F_i

    def movement(lam: float) -> float:
        model = copy.deepcopy(ws.model)
        branch = dataclasses.replace(ws, model=model, lambdas=[0.0, lam, 0.0, 0.0])
        run_task(branch, copy.deepcopy(state), 1, progress=False, test=False)
        moved = torch.cat([(p.detach() - after_first[name]).reshape(-1) for name, p in model.named_parameters()])
        return float(moved[important].abs().mean())

    free, held = movement(0.0), movement(1e8)
    assert held < 0.5 * free, (held, free)


def test_ewc_resumes_from_its_checkpoint_exactly(tiny_cache, tmp_path):
    ws = workspace(tiny_cache, "ewc", lambdas=[0.0, 1e4, 1e4, 1e4])
    base = copy.deepcopy(ws.model.state_dict())
    saved = {}

    def save(ws, state, t):
        if t == 0:
            checkpoints.save(tmp_path, ws, state)
            saved["model"] = copy.deepcopy(ws.model.state_dict())

    state = run_continual(ws, progress=False, on_task=save)
    assert {"model.safetensors", "memory.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    ws.model.load_state_dict(base)
    resumed = checkpoints.load(tmp_path, ws)
    assert all(torch.equal(ws.model.state_dict()[k], v) for k, v in saved["model"].items())
    run_continual(ws, resumed, progress=False)
    assert resumed.records[1].ce == state.records[1].ce and resumed.records[1].test == state.records[1].test


def olora_overlap(tiny_cache, lambda1: float) -> float:
    """Σ_m Σ|A_1 A_2ᵀ| / (‖A_1‖ ‖A_2‖) of task 2's lora_A against task 1's, from the stack O-LoRA remembers."""
    ws = workspace(tiny_cache, "o-lora", olora_lambda1=lambda1, max_train_per_task=160)
    state = run_continual(ws, progress=False)
    total = 0.0
    for stack in state.memory.values():  # (2r, d_in): task 1's rows, then task 2's
        first, second = stack[:8], stack[8:]
        total += float(orthogonality_loss({"m": first}, {"m": second})) / float(first.norm() * second.norm())
    return total


def test_olora_makes_the_new_lora_a_more_orthogonal_to_the_past_ones(tiny_cache):
    assert olora_overlap(tiny_cache, 50.0) < olora_overlap(tiny_cache, 0.0)


def test_mtl_trains_once_on_the_union_and_evaluates_every_task(tiny_cache):
    ws = workspace(tiny_cache, "mtl")
    state = run_continual(ws, progress=False)
    assert len(state.records) == 1
    union = sum(len(ws.encoded[task]["train"]) for task in ws.tasks)
    assert len(state.records[0].ce) == -(-union // ws.config.batch_size)  # one epoch over 2 × 96 examples
    results = summarise(ws, state, None)
    row = results.accuracy_matrix[0]
    assert len(results.accuracy_matrix) == 1 and len(row) == 2 and None not in row
    assert results.oa == pytest.approx(100 * sum(row) / 2)
    assert results.bwt is None and results.fwt is None and results.fwt_last_row is None
