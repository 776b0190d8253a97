"""`step_modes.SameDraws`: a forward over K different blocks of rows inside it gives block k what a forward of those
rows alone gives from the same RNG state, and leaves the RNG where one such forward leaves it: a dropout's mask drawn
once for one block's shape and tiled (T5's dropouts), an SDPA attention with dropout replayed block by block from one
state (a Llama-style decoder's `attention_dropout`); a dropout or attention that draws nothing (eval, p = 0) runs as
it is."""

import pytest
import torch
from torch import nn

from jumplora.losses import prepared_mask
from jumplora.step_modes import SameDraws
from tests.conftest import make_llama, make_t5

K, ROWS, LENGTH = 3, 2, 7


class CountedDraws(SameDraws):
    """SameDraws counting the draws it shares: dropouts that draw, attentions it replays."""

    def __init__(self, copies: int) -> None:
        super().__init__(copies)
        self.dropouts = self.replays = 0

    def dropout(self, input, p=0.5, training=True, inplace=False):
        self.dropouts += training and p != 0.0
        return super().dropout(input, p, training, inplace)

    def replayed(self, func, args, kwargs):
        self.replays += 1
        return super().replayed(func, args, kwargs)


def t5_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 decoder_input_ids=batch["decoder_input_ids"]).logits


def llama_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=prepared_mask(model, batch["attention_mask"]),
                 use_cache=False).logits


def blocks(seed: int) -> list[dict[str, torch.Tensor]]:
    """K batches of ROWS rows, each its own tokens and padding."""
    generator = torch.Generator().manual_seed(seed)
    found = []
    for k in range(K):
        mask = torch.ones(ROWS, LENGTH, dtype=torch.long)
        mask[0, LENGTH - 1 - k:] = 0  # block k's first row padded by k + 1
        found.append({"input_ids": torch.randint(2, 50, (ROWS, LENGTH), generator=generator), "attention_mask": mask,
                      "decoder_input_ids": torch.randint(2, 50, (ROWS, 3), generator=generator)})
    return found


def alone_and_together(model, forward, batches):
    """Each batch's output alone from one RNG state, then the K batches' in one forward inside CountedDraws from that
    state: (the outputs alone, the blocks of the one forward, the RNG states after each, the draws counted)."""
    start = torch.random.get_rng_state()
    alone = []
    for batch in batches:
        torch.random.set_rng_state(start)
        with torch.no_grad():
            alone.append(forward(model, batch))
    after_alone = torch.random.get_rng_state()
    torch.random.set_rng_state(start)
    together = {key: torch.cat([batch[key] for batch in batches]) for key in batches[0]}
    with torch.no_grad(), CountedDraws(len(batches)) as draws:
        output = forward(model, together)
    return alone, output.chunk(len(batches)), (after_alone, torch.random.get_rng_state()), draws


@pytest.mark.parametrize(("family", "dropout"), [("t5", 0.2), ("llama", 0.2)])
def test_each_block_draws_what_its_rows_draw_alone(family, dropout):
    if family == "t5":
        model, forward = make_t5(), t5_logits
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = dropout
    else:
        model, forward = make_llama(attention_dropout=dropout), llama_logits
        assert model.config._attn_implementation == "sdpa"
    batches = blocks(seed=3)
    with torch.no_grad():
        plain = forward(model, batches[0])  # eval: no dropout
    torch.manual_seed(5)
    alone, together, (after_alone, after), draws = alone_and_together(model.train(), forward, batches)
    assert not torch.allclose(alone[0], plain)  # the dropout acts
    if family == "t5":  # its dropouts, attention weights' among them (T5 has no SDPA)
        assert draws.dropouts > 0 and draws.replays == 0
    else:  # attention's dropout alone, inside SDPA: once per layer
        assert draws.dropouts == 0 and draws.replays == model.config.num_hidden_layers
    assert torch.equal(after, after_alone)
    for ours, theirs in zip(together, alone, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("family", "training"), [("t5", False), ("t5", True), ("llama", False), ("llama", True)])
def test_a_forward_that_draws_nothing_runs_as_it_is(family, training):
    """Eval, or p = 0 in training: nothing drawn, nothing shared, the RNG untouched."""
    model, forward = (make_t5(), t5_logits) if family == "t5" else (make_llama(), llama_logits)  # p = 0
    batches = blocks(seed=4)
    torch.manual_seed(5)
    alone, together, (after_alone, after), draws = alone_and_together(model.train(training), forward, batches)
    assert (draws.dropouts, draws.replays) == (0, 0)
    assert torch.equal(after, after_alone) and torch.equal(after, torch.manual_seed(5).get_state())
    for ours, theirs in zip(together, alone, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
