"""The training loop and the fast evaluation on the tiny preset ask nothing of the host per step or batch: the ops that
are host syncs on a GPU, counted on the CPU as the difference of a run of 2N steps (batches) and one of N. bf16 casts
the frozen weights once per task, and merges into their fp32 master."""

import dataclasses

import pytest
import torch
from torch import nn

import jumplora.evaluation as evaluation
from jumplora.adapters import find_targets
from jumplora.config import RunConfig
from jumplora.continual import prepare
from jumplora.evaluation import exact_match_flags
from jumplora.methods import make_regulariser
from jumplora.profiling import HostSyncs, WeightCasts
from jumplora.training import train_task

STEPS = 3  # N: the fewest a task may have
BATCH = 2
TARGETS = ("q", "v")
# bf16 on the CPU, under CPU autocast: `train_task` follows the device it is given (the run itself refuses bf16 off
# CUDA, so the config names no device)
BF16 = {"precision": "bf16", "device": "auto"}


@pytest.fixture(scope="module")
def ws(tiny_cache):
    config = RunConfig(order=1, method="jumplora+ella", lambdas=[0.0, 1e3, 1e3, 1e3], batch_size=BATCH,
                       max_train_per_task=2 * STEPS * BATCH, max_eval_per_task=4 * BATCH, max_tasks=2, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, above all on a loaded machine
    yield prepare(config, tiny_cache, progress=False)
    torch.set_num_threads(threads)


def train_steps(ws, steps: int, regulariser=None, lam: float = 0.0, **changes):
    """Task 2 of the order for `steps` steps from the preset's weights, which are put back afterwards (the record is
    returned, the model's merged weights are in `train_steps.merged`)."""
    settings = {"settings": None} if "method" in changes else {}  # another method: its own settings' defaults
    config = dataclasses.replace(ws.config, **settings, **changes)
    start = {name: value.clone() for name, value in ws.model.state_dict().items()}
    task = ws.tasks[1]
    trained = train_task(ws.model, ws.encoded[task]["train"][: steps * BATCH], task_name=task, task_seed=1,
                         lams=[lam], regularisers=[regulariser], config=config, pad_id=ws.tokenizer.pad_token_id,
                         device=ws.device, progress=False)
    record = trained.record(0)
    trained.adapter.merge(0)
    train_steps.merged = {name: p.detach().clone() for name, p in ws.model.named_parameters()}
    ws.model.load_state_dict(start)
    return record


def syncs_per_step(ws, method: str) -> dict[str, float]:
    """Host reads per step of `method` with ELLA's penalty (λ = 1e3 against a random W_past of every adapted module),
    in the model's forward, the optimizer's step and the loop's own code."""
    generator = torch.Generator().manual_seed(0)
    past = {name: 0.01 * torch.randn(module.weight.shape, generator=generator)
            for name, module in find_targets(ws.model, TARGETS).items()}
    config = dataclasses.replace(ws.config, method=method)
    counts = []
    for steps in (STEPS, 2 * STEPS):
        with HostSyncs(ws.model) as syncs:
            train_steps(ws, steps, make_regulariser(config, dict(past)), 1e3, method=method)
        counts.append(syncs)
    few, more = counts
    return {place: (getattr(more, place) - getattr(few, place)) / STEPS for place in ("forward", "optimizer", "loop")}


def test_a_warm_step_syncs_no_more_than_peft_lora_and_the_loop_not_at_all(ws):
    jump, lora = syncs_per_step(ws, "jumplora+ella"), syncs_per_step(ws, "ella")
    assert jump["forward"] + jump["loop"] <= lora["forward"] + lora["loop"]
    assert jump["loop"] == 0 and lora["loop"] == 0
    # the counter sees them: CPU AdamW reads each parameter's host-held step counter every step; JumpLoRA trains A and
    # B of every q and v, and one log τ
    modules = len(find_targets(ws.model, TARGETS))
    assert jump["optimizer"] == 2 * modules + 1 and lora["optimizer"] == 2 * modules


def test_a_fast_evaluation_batch_issues_no_host_sync(ws, monkeypatch):
    # `generate` decides what the teacher-forced pass cannot (it syncs at every new token, by design): not counted
    monkeypatch.setattr(evaluation, "_generate_flags", lambda model, tok, examples, *_: [False] * len(examples))
    examples = [example for task in ws.tasks for example in ws.encoded[task]["test"]]
    assert len(examples) >= 2 * STEPS * BATCH
    counts = []
    for batches in (STEPS, 2 * STEPS):
        with HostSyncs(ws.model) as syncs:
            exact_match_flags(ws.model, ws.tokenizer, examples[: batches * BATCH], batch_size=BATCH, progress=False)
        counts.append(syncs)
    few, more = counts
    assert (more.forward, more.loop) == (few.forward, few.loop)
    assert few.forward == 0 and few.loop <= 1  # at most the one read-back of the whole evaluation (none on the CPU)


def test_bf16_casts_the_frozen_weights_once_per_task(ws):
    """Every frozen linear that is not adapted is cast once, when the task starts, whatever its number of steps."""
    frozen = [p for p in ws.model.parameters()]
    linears = sum(isinstance(module, nn.Linear) for module in ws.model.modules())
    casts = []
    for steps in (STEPS, 2 * STEPS):
        with WeightCasts(frozen) as counter:
            train_steps(ws, steps, method="jumplora+inclora", **BF16)
        casts.append(counter.count)
    assert casts == [linears - len(find_targets(ws.model, TARGETS))] * 2  # T5 has no biases


def test_a_bf16_task_merges_a_small_update_into_the_fp32_weights(ws):
    before = {name: p.detach().clone() for name, p in ws.model.named_parameters()}
    tied = ws.model.lm_head.weight is ws.model.shared.weight
    record = train_steps(ws, STEPS, method="jumplora+inclora", **BF16)
    after = train_steps.merged
    assert all(p.dtype == torch.float32 for p in after.values()) and after.keys() == before.keys()
    assert (ws.model.lm_head.weight is ws.model.shared.weight) == tied  # the tie is back after the task
    below_bf16 = 0
    for name, update in record.update.items():
        old, new = before[f"{name}.weight"], after[f"{name}.weight"]
        assert update.dtype == torch.float32
        assert torch.equal(new, old + update)
        # entries that a merge into bf16 weights would have rounded away, and which did land
        below_bf16 += int(((update != 0) & ((old + update).bfloat16() == old.bfloat16()) & (new != old)).sum())
    assert below_bf16 > 0
