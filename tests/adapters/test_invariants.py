"""One matrix of adapter invariants over every adapter kind and both model families (a T5, a Llama-style causal
decoder): merge is exact, only adapter parameters train, merged updates and merged models survive a save/load
round-trip."""

import pytest
import torch

from jumplora.adapters import JUMPLORA, LORA, JumpLoraAdapter, LoraAdapter
from jumplora.outputs import load_updates, save_updates
from tests.conftest import adapter_settings, make_llama, make_t5

TOTAL_STEPS = 10  # S_start = 2, S_final = 8
# family → (model, the adapted layers, the per_block groups: 2 encoder + 2 decoder blocks, or 2 decoder layers)
FAMILIES = {
    "t5": (make_t5, ("q", "v"), {"encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1"}),
    "llama": (make_llama, ("q_proj", "v_proj"), {"model.layers.0", "model.layers.1"}),
}


def attach(kind: str, model, targets: tuple[str, ...]):
    if kind == "lora":
        return LoraAdapter(model, adapter_settings(LORA, targets, rank=4, alpha=16, lora_dropout=0.0), TOTAL_STEPS)
    return JumpLoraAdapter(model, adapter_settings(JUMPLORA, targets, rank=4, alpha=16, threshold=kind), TOTAL_STEPS)


@pytest.fixture(params=list(FAMILIES))
def family(request):
    """(model, a batch whose `.loss` and `.logits` the model computes, target modules, per_block groups)."""
    build, targets, blocks = FAMILIES[request.param]
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(2, 50, (3, 7), generator=generator)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    # T5: the labels are the decoder's inputs; the causal LM: the next-token loss over the sequence itself
    batch["labels"] = torch.randint(2, 50, (3, 3), generator=generator) if request.param == "t5" else input_ids
    return build(), batch, targets, blocks


def randomise_factors(adapter):
    """B = 0 at init makes ΔW = 0; give every factor random values so merges are non-trivial."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in adapter.trainable_parameters(0):
            if p.dim() == 2:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


KINDS = ["lora", "global", "per_block"]


@pytest.mark.parametrize("kind", KINDS)
def test_merged_equals_adapted_output(kind, family):
    model, batch, targets, blocks = family
    adapter = attach(kind, model, targets)
    randomise_factors(adapter)
    adapter.after_step(adapter.s_start if kind != "lora" else 1)  # τ by count (JumpLoRA)
    adapter.before_step(TOTAL_STEPS)  # γ = 1
    adapted = logits(model, batch)
    updates = adapter.finish()[0]
    adapter.merge(0)
    assert not any(hasattr(m, "lora_A") for m in model.modules())
    assert not any("lora" in name for name, _ in model.named_parameters())
    torch.testing.assert_close(logits(model, batch), adapted, rtol=1e-4, atol=1e-4)  # fp32 re-association
    if kind != "lora":  # the hard threshold really sparsified: LoRA-parameter count kept per group
        kept = sum(int((u != 0).sum()) for u in updates.values())
        assert 0 < kept < sum(u.numel() for u in updates.values())
    assert {name.rsplit(".", 1)[1] for name in updates} == set(targets)
    if kind == "per_block":  # one τ per transformer block: encoder and decoder blocks, or decoder layers
        assert set(adapter.thresholds()[0]) == blocks


@pytest.mark.parametrize("kind", KINDS)
def test_only_adapter_parameters_change(kind, family):
    model, batch, targets, _ = family
    model.requires_grad_(False)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    adapter = attach(kind, model, targets)
    params = adapter.trainable_parameters(0)
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    model.train()
    for step in range(1, 5):
        adapter.before_step(step)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        adapter.after_step(step)
    trainable = {id(p) for p in params}
    for name, p in model.named_parameters():
        if id(p) in trainable:
            continue
        key = name.replace(".base_layer", "")
        torch.testing.assert_close(p, before[key], rtol=0, atol=0, msg=f"{name} changed")
    assert any(not torch.equal(p, torch.zeros_like(p)) for p in params if p.dim() == 2 and p.shape[1] == 4)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind, family, tmp_path):
    model, batch, targets, _ = family
    adapter = attach(kind, model, targets)
    randomise_factors(adapter)
    adapter.after_step(adapter.s_start if kind != "lora" else 1)
    adapter.before_step(TOTAL_STEPS)
    updates = adapter.finish()[0]
    adapter.merge(0)
    save_updates(tmp_path / "u.safetensors", updates)
    loaded = load_updates(tmp_path / "u.safetensors")
    assert loaded.keys() == updates.keys()
    for name in updates:
        torch.testing.assert_close(loaded[name], updates[name], rtol=0, atol=0)
    model.save_pretrained(tmp_path / "model")
    reloaded = type(model).from_pretrained(tmp_path / "model").eval()
    torch.testing.assert_close(logits(reloaded, batch), logits(model, batch))
