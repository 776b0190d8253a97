"""JumpLoRA specifics: per_block groups on a real T5 tree, τ by count at S_start, refusals, merged update."""

import pytest
import torch

from jumplora.adapters import JUMPLORA, JumpLoraAdapter
from jumplora.errors import JumpLoRAError
from jumplora.methods.ella import adapter_penalty, ella_penalty
from tests.conftest import adapter_settings, make_t5


def test_per_block_groups_on_a_t5_tree():
    model = make_t5(num_layers=2, num_decoder_layers=3)
    adapter = JumpLoraAdapter(model, adapter_settings(JUMPLORA, threshold="per_block"), total_steps=10)
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
    assert len(adapter.trainable_parameters(0)) == 5 + 2 * (2 * 2 + 3 * 4)


def test_global_group_shares_one_tau():
    adapter = JumpLoraAdapter(make_t5(), adapter_settings(JUMPLORA), total_steps=10)
    assert list(adapter.groups) == ["global"]
    assert len({id(layer.group) for layer in adapter.layers.values()}) == 1


@pytest.mark.parametrize("threshold", ["global", "per_block"])
def test_tau_by_count_keeps_lora_parameter_count_per_group(threshold):
    adapter = JumpLoraAdapter(make_t5(), adapter_settings(JUMPLORA, rank=4, threshold=threshold), total_steps=10)
    with torch.no_grad():
        for layer in adapter.layers.values():
            layer.lora_B[0].normal_()
    adapter.after_step(adapter.s_start - 1)
    assert all(not g.initialized for g in adapter.groups.values())
    adapter.after_step(adapter.s_start)
    for group_name, group in adapter.groups.items():
        layers = [layer for layer in adapter.layers.values() if layer.group is group]
        kept = sum(int((layer.delta(0).abs() > group.tau(0)).sum()) for layer in layers)
        n_lora = sum(layer.lora_A[0].numel() + layer.lora_B[0].numel() for layer in layers)
        assert abs(kept - n_lora) <= 1, group_name  # fp32 log τ may move τ by an ulp


def test_refuses_groups_with_no_more_entries_than_lora_parameters():
    with pytest.raises(JumpLoRAError, match="pointless"):
        JumpLoraAdapter(make_t5(d_model=8), adapter_settings(JUMPLORA, rank=8), total_steps=10)


def test_merge_applies_the_hard_threshold():
    model = make_t5()
    adapter = JumpLoraAdapter(model, adapter_settings(JUMPLORA, rank=4, alpha=16), total_steps=10)
    name, layer = next(iter(adapter.layers.items()))
    with torch.no_grad():
        layer.lora_B[0].normal_()
    weight_before = layer.base_layer.weight.detach().clone()
    adapter.after_step(adapter.s_start)
    delta, tau = layer.delta(0).detach(), float(layer.group.tau(0).detach())
    updates = adapter.finish()[0]
    assert model.get_submodule(name) is layer.base_layer and torch.equal(layer.base_layer.weight, weight_before)
    adapter.merge(0)
    expected = 4.0 * delta * (delta.abs() > tau)  # β = alpha / r = 4
    torch.testing.assert_close(updates[name], expected)
    torch.testing.assert_close(model.get_submodule(name).weight, weight_before + expected)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("bandwidth", 0.0, "bandwidth"), ("jump_start", 0.8, "f_start < f_final"), ("threshold", "layer", "threshold"),
    ("rank", 0, "rank"),
])
def test_config_refusals(field, value, message):
    with pytest.raises(JumpLoRAError, match=message):
        adapter_settings(JUMPLORA, **{field: value})


class TwoBlocks(torch.nn.Module):
    """Just nn.Linear q and v in two numbered blocks (`block.0.q`, …): 16×16 entries ≫ r·(16 + 16) at r = 2."""

    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.ModuleList(
            torch.nn.ModuleDict({"q": torch.nn.Linear(16, 16), "v": torch.nn.Linear(16, 16)}) for _ in range(2))


def filled_adapter(threshold: str, compat: bool, total_steps: int = 10) -> JumpLoraAdapter:
    """A JumpLoRA adapter on `TwoBlocks` with random A and B (ΔW ≠ 0, no ties)."""
    torch.manual_seed(3)
    adapter = JumpLoraAdapter(TwoBlocks(), adapter_settings(JUMPLORA, rank=2, alpha=4, threshold=threshold,
                                                              authors_compat=compat),
                              total_steps)
    with torch.no_grad():
        for layer in adapter.layers.values():
            layer.lora_A[0].normal_()
            layer.lora_B[0].normal_()
    return adapter


@pytest.mark.parametrize(("threshold", "compat", "fewer"), [
    ("global", False, 0), ("global", True, 1), ("per_block", False, 0), ("per_block", True, 0),
])
def test_authors_count_keeps_one_fewer_in_global_mode(threshold, compat, fewer):
    """|ΔW| > τ after step S_start: n entries (n = the group's LoRA parameters); the authors' code keeps n − 1 in
    `global` mode and n in `per_block` (their off-by-one)."""
    adapter = filled_adapter(threshold, compat)
    adapter.after_step(adapter.s_start)
    for group_name, group in adapter.groups.items():
        layers = [layer for layer in adapter.layers.values() if layer.group is group]
        kept = sum(int((layer.delta(0).abs() > group.tau(0)).sum()) for layer in layers)
        n_lora = sum(layer.lora_A[0].numel() + layer.lora_B[0].numel() for layer in layers)
        assert n_lora == len(layers) * 2 * (16 + 16)
        assert kept == n_lora - fewer, group_name


@pytest.mark.parametrize("compat", [False, True])
def test_gamma_per_step_follows_the_schedule_and_its_lag(compat):
    adapter = filled_adapter("global", compat)
    gammas = []
    for step in range(1, 11):
        adapter.before_step(step)
        gammas.append(adapter.groups["global"].gamma)
    spec = [0, 0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1, 1, 1]  # S = 10: S_start 2, S_final 8
    assert gammas == pytest.approx([0.0, *spec[:-1]] if compat else spec)


@pytest.mark.parametrize(("compat", "first_masked"), [(False, 3), (True, 4)])
def test_sparse_ella_mask_starts_at_s_start_plus_one_or_plus_two(compat, first_masked):
    """P over β ΔW (dense) up to the step before `first_masked`, over β ΔW ⊙ H(|ΔW| − τ) from it: S_start + 1 = 3
    (SPEC), S_start + 2 = 4 with `authors_compat`."""
    adapter = filled_adapter("global", compat)
    adapter.after_step(adapter.s_start)
    generator = torch.Generator().manual_seed(11)
    past = {name: torch.randn(16, 16, generator=generator) for name in adapter.layers}
    with torch.no_grad():
        dense = {name: 2.0 * layer.delta(0) for name, layer in adapter.layers.items()}  # β = alpha / r = 2
        masked = {name: 2.0 * layer.delta(0) * layer.hard_mask(layer.delta(0), 0)
                  for name, layer in adapter.layers.items()}
        p_dense, p_masked = float(ella_penalty(dense, past)), float(ella_penalty(masked, past))
    assert p_masked < 0.9 * p_dense  # the mask drops most entries
    for step in range(1, 11):
        adapter.before_step(step)
        expected = p_masked if step >= first_masked else p_dense
        sparse = float(adapter_penalty(adapter.factors(0), "sparse", past).detach())
        assert sparse == pytest.approx(expected, rel=1e-5), step
        if step < first_masked:  # interpolated: γ = 0 before the mask starts, so also dense
            interpolated = float(adapter_penalty(adapter.factors(0), "interpolated", past).detach())
            assert interpolated == pytest.approx(p_dense, rel=1e-5), step
