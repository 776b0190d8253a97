"""Full fine-tuning behind the adapter protocol (EWC, SeqFT): every weight trains once, the model is frozen again,
and the recorded update is exactly the change of the q / v weights."""

import pytest
import torch

from jumplora.adapters import CopyView, FullConfig, FullFineTune
from jumplora.errors import JumpLoRAError
from jumplora.methods.ella import Ella
from jumplora.methods.olora import OLora


def test_every_weight_trains_and_the_update_is_the_change_of_q_and_v(t5, t5_batch):
    t5.requires_grad_(False)
    before = {name: p.detach().clone() for name, p in t5.named_parameters()}
    adapter = FullFineTune(t5, FullConfig(target_modules=("q", "v")), total_steps=3)
    params = adapter.trainable_parameters(0)
    assert len(params) == len(before) == len({id(p) for p in params})  # tied embeddings once
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    t5.train()
    for step in range(1, 3):
        adapter.before_step(step)
        optimizer.zero_grad()
        t5(**t5_batch).loss.backward()
        optimizer.step()
        adapter.after_step(step)
    [updates] = adapter.finish()
    after = dict(t5.named_parameters())
    assert not any(p.requires_grad for p in t5.parameters())
    for name in ("shared.weight", "encoder.final_layer_norm.weight"):  # not only q and v: every weight trained
        assert not torch.equal(after[name], before[name]), name
    q_and_v = sorted(n.removesuffix(".weight") for n in before if n.endswith((".q.weight", ".v.weight")))
    assert sorted(updates) == q_and_v and len(q_and_v) == 12  # 2 encoder self + 2×2 decoder (self, cross), q and v
    for name, update in updates.items():
        assert torch.equal(update, after[f"{name}.weight"].detach() - before[f"{name}.weight"])
    assert adapter.thresholds() == [{}] and not adapter.stacks


def test_full_fine_tuning_has_no_factors_so_ella_and_olora_refuse_it(t5):
    adapter = FullFineTune(t5, FullConfig(target_modules=("q", "v")), total_steps=3)
    assert adapter.factors(0) == {}
    with pytest.raises(JumpLoRAError, match="O-LoRA needs an adapter method"):
        OLora({}, lambda1=0.5, lambda2=0.0).start_task(CopyView(adapter, 0))
    with pytest.raises(JumpLoRAError, match="ELLA's penalty needs a LoRA update"):
        Ella({}, "sparse").start_task(CopyView(adapter, 0))
