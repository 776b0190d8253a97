"""One matrix of adapter invariants over every adapter kind: merge is exact, only adapter parameters train,
merged updates and merged models survive a save/load round-trip."""

import pytest
import torch

from jumplora.adapters import JumpLoraAdapter, JumpLoraConfig, PeftLoraAdapter, PlainLoraConfig
from jumplora.outputs import load_updates, save_updates

TOTAL_STEPS = 10  # S_start = 2, S_final = 8


def attach(kind: str, model):
    if kind == "lora":
        return PeftLoraAdapter(model, PlainLoraConfig(r=4, alpha=16, dropout=0.0), TOTAL_STEPS)
    return JumpLoraAdapter(model, JumpLoraConfig(r=4, alpha=16, threshold=kind), TOTAL_STEPS)


def randomise_factors(adapter):
    """B = 0 at init makes ΔW = 0; give every factor random values so merges are non-trivial."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in adapter.trainable_parameters():
            if p.dim() == 2:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


KINDS = ["lora", "global", "per_block"]


@pytest.mark.parametrize("kind", KINDS)
def test_merged_equals_adapted_output(kind, t5, t5_batch):
    adapter = attach(kind, t5)
    randomise_factors(adapter)
    adapter.after_step(adapter.s_start if kind != "lora" else 1)  # τ by count (JumpLoRA)
    adapter.before_step(TOTAL_STEPS)  # γ = 1
    adapted = logits(t5, t5_batch)
    updates = adapter.merge()
    assert all(type(m).__name__ != "JumpLoraLinear" for m in t5.modules())
    assert not any("lora" in name for name, _ in t5.named_parameters())
    torch.testing.assert_close(logits(t5, t5_batch), adapted, rtol=1e-4, atol=1e-4)  # fp32 re-association
    if kind != "lora":  # the hard threshold really sparsified: LoRA-parameter count kept per group
        kept = sum(int((u != 0).sum()) for u in updates.values())
        assert 0 < kept < sum(u.numel() for u in updates.values())


@pytest.mark.parametrize("kind", KINDS)
def test_only_adapter_parameters_change(kind, t5, t5_batch):
    t5.requires_grad_(False)
    before = {name: p.detach().clone() for name, p in t5.named_parameters()}
    adapter = attach(kind, t5)
    params = adapter.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    t5.train()
    for step in range(1, 5):
        adapter.before_step(step)
        t5(**t5_batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        adapter.after_step(step)
    trainable = {id(p) for p in params}
    for name, p in t5.named_parameters():
        if id(p) in trainable:
            continue
        key = name.replace(".base_layer", "")
        torch.testing.assert_close(p, before[key], rtol=0, atol=0, msg=f"{name} changed")
    assert any(not torch.equal(p, torch.zeros_like(p)) for p in params if p.dim() == 2 and p.shape[1] == 4)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind, t5, t5_batch, tmp_path):
    adapter = attach(kind, t5)
    randomise_factors(adapter)
    adapter.after_step(adapter.s_start if kind != "lora" else 1)
    adapter.before_step(TOTAL_STEPS)
    updates = adapter.merge()
    save_updates(tmp_path / "u.safetensors", updates)
    loaded = load_updates(tmp_path / "u.safetensors")
    assert loaded.keys() == updates.keys()
    for name in updates:
        torch.testing.assert_close(loaded[name], updates[name], rtol=0, atol=0)
    t5.save_pretrained(tmp_path / "model")
    reloaded = type(t5).from_pretrained(tmp_path / "model").eval()
    torch.testing.assert_close(logits(reloaded, t5_batch), logits(t5, t5_batch))
