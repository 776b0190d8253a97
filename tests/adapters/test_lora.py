"""The project's LoRA layer against PEFT's, which it replaces (docs/DECISIONS.md): the same start from the same RNG
draws, the same forward with dropout in training, the same gradients and the same merged weights, bit for bit; and K
copies of it, each copy routed its own rows, as one adapter alone."""

import warnings

import torch

from jumplora.adapters import LORA, LoraAdapter
from tests.conftest import adapter_settings, make_t5


def peft_lora(model):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=16, target_modules=["q", "v"], lora_dropout=0.1))
    layers = {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}
    return peft_model, layers


def step(model, batch, seed: int) -> torch.Tensor:
    """The loss of one training forward (dropout drawn from `seed`), backward done."""
    model.train()
    torch.manual_seed(seed)
    loss = model(**batch).loss
    loss.backward()
    return loss.detach()


def test_it_starts_trains_and_merges_as_peft_lora_bit_for_bit(t5_batch):
    theirs_model, ours_model = make_t5(), make_t5()
    torch.manual_seed(5)
    peft_model, theirs = peft_lora(theirs_model)
    after_peft = torch.get_rng_state()
    torch.manual_seed(5)
    ours = LoraAdapter(ours_model, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.1), total_steps=3)
    assert torch.equal(torch.get_rng_state(), after_peft)  # the same draws: the dropout masks that follow agree
    assert list(ours.layers) == list(theirs) and len(ours.layers) == 12
    for name, layer in ours.layers.items():
        a, b = theirs[name].lora_A["default"].weight, theirs[name].lora_B["default"].weight
        assert torch.equal(layer.lora_A[0], a) and torch.equal(layer.lora_B[0], b) and not b.any()
        with torch.no_grad():  # B ≠ 0, so the update acts
            b.copy_(0.1 * torch.randn(b.shape, generator=torch.Generator().manual_seed(b.numel())))
            layer.lora_B[0].copy_(b)
    assert torch.equal(step(ours_model, t5_batch, 7), step(theirs_model, t5_batch, 7))
    assert all(torch.equal(layer.lora_A[0].grad, theirs[name].lora_A["default"].weight.grad)
               and torch.equal(layer.lora_B[0].grad, theirs[name].lora_B["default"].weight.grad)
               for name, layer in ours.layers.items())
    [update] = ours.finish()
    ours.merge(0)
    with torch.no_grad():
        expected = {name: layer.get_delta_weight("default") for name, layer in theirs.items()}
    peft_model.merge_and_unload()
    assert all(torch.equal(update[name], expected[name]) for name in expected)
    theirs_state, ours_state = theirs_model.state_dict(), ours_model.state_dict()
    assert theirs_state.keys() == ours_state.keys()
    assert all(torch.equal(ours_state[name], theirs_state[name]) for name in theirs_state)


def test_each_copy_routed_its_rows_computes_as_one_adapter_alone(t5_batch):
    alone_model, copies_model = make_t5(), make_t5()
    torch.manual_seed(5)
    alone = LoraAdapter(alone_model, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), total_steps=3)
    torch.manual_seed(5)
    copies = LoraAdapter(copies_model, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), total_steps=3,
                         copies=2)
    with torch.no_grad():
        for name, layer in copies.layers.items():
            assert all(torch.equal(layer.lora_A[k], alone.layers[name].lora_A[0]) for k in range(2))  # one start
            layer.lora_B[1].normal_()  # copy 1 moves away; copy 0 stays the adapter alone
    alone_model.eval(), copies_model.eval()
    with torch.no_grad():
        expected = alone_model(**t5_batch).logits
        with copies.route(0):
            assert torch.equal(copies_model(**t5_batch).logits, expected)
        with copies.route(1):
            assert not torch.allclose(copies_model(**t5_batch).logits, expected)
        both = {key: value.repeat(2, *(1,) * (value.dim() - 1)) for key, value in t5_batch.items()}
        with copies.route(None):  # K copies of the batch in blocks: block 0 through copy 0
            assert float((copies_model(**both).logits[:3] - expected).abs().max()) < 1e-5
    assert [len(copies.trainable_parameters(k)) for k in range(2)] == [24, 24]
