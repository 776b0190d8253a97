"""JumpLoRA specifics: per_block groups on a real T5 tree, τ by count at S_start, refusals, merged update."""

import pytest
import torch

from jumplora.adapters import JumpLoraAdapter, JumpLoraConfig
from jumplora.errors import JumpLoRAError
from tests.conftest import make_t5


def test_per_block_groups_on_a_t5_tree():
    model = make_t5(num_layers=2, num_decoder_layers=3)
    adapter = JumpLoraAdapter(model, JumpLoraConfig(threshold="per_block"), total_steps=10)
    members = {g: sorted(n for n, layer in adapter.layers.items() if layer.group is grp)
               for g, grp in adapter.groups.items()}
    assert sorted(members) == ["decoder.block.0", "decoder.block.1", "decoder.block.2",
                               "encoder.block.0", "encoder.block.1"]
    assert members["encoder.block.1"] == ["encoder.block.1.layer.0.SelfAttention.q",
                                          "encoder.block.1.layer.0.SelfAttention.v"]
    assert members["decoder.block.2"] == [
        "decoder.block.2.layer.0.SelfAttention.q", "decoder.block.2.layer.0.SelfAttention.v",
        "decoder.block.2.layer.1.EncDecAttention.q", "decoder.block.2.layer.1.EncDecAttention.v"]
    # 5 τ parameters + A and B of 2·2 encoder + 3·4 decoder modules
    assert len(adapter.trainable_parameters()) == 5 + 2 * (2 * 2 + 3 * 4)


def test_global_group_shares_one_tau():
    adapter = JumpLoraAdapter(make_t5(), JumpLoraConfig(), total_steps=10)
    assert list(adapter.groups) == ["global"]
    assert len({id(layer.group) for layer in adapter.layers.values()}) == 1


@pytest.mark.parametrize("threshold", ["global", "per_block"])
def test_tau_by_count_keeps_lora_parameter_count_per_group(threshold):
    adapter = JumpLoraAdapter(make_t5(), JumpLoraConfig(r=4, threshold=threshold), total_steps=10)
    with torch.no_grad():
        for layer in adapter.layers.values():
            layer.lora_B.normal_()
    adapter.after_step(adapter.s_start - 1)
    assert all(not g.initialized for g in adapter.groups.values())
    adapter.after_step(adapter.s_start)
    for group_name, group in adapter.groups.items():
        layers = [layer for layer in adapter.layers.values() if layer.group is group]
        kept = sum(int((layer.delta().abs() > group.tau).sum()) for layer in layers)
        n_lora = sum(layer.lora_A.numel() + layer.lora_B.numel() for layer in layers)
        assert abs(kept - n_lora) <= 1, group_name  # fp32 log τ may move τ by an ulp


def test_refuses_groups_with_no_more_entries_than_lora_parameters():
    with pytest.raises(JumpLoRAError, match="pointless"):
        JumpLoraAdapter(make_t5(d_model=8), JumpLoraConfig(r=8), total_steps=10)


def test_merge_applies_the_hard_threshold():
    model = make_t5()
    adapter = JumpLoraAdapter(model, JumpLoraConfig(r=4, alpha=16), total_steps=10)
    name, layer = next(iter(adapter.layers.items()))
    with torch.no_grad():
        layer.lora_B.normal_()
    weight_before = layer.base_layer.weight.detach().clone()
    adapter.after_step(adapter.s_start)
    delta, tau = layer.delta().detach(), float(layer.group.tau.detach())
    updates = adapter.merge()
    expected = 4.0 * delta * (delta.abs() > tau)  # β = alpha / r = 4
    torch.testing.assert_close(updates[name], expected)
    torch.testing.assert_close(model.get_submodule(name).weight, weight_before + expected)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("bandwidth", 0.0, "bandwidth"), ("start_frac", 0.8, "f_start < f_final"), ("threshold", "layer", "threshold"),
    ("r", 0, "rank"),
])
def test_config_refusals(field, value, message):
    with pytest.raises(JumpLoRAError, match=message):
        JumpLoraConfig(**{field: value})
