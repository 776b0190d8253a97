"""The label CE of both families: a causal model's logits are taken only where a label token is predicted, and
equal the full forward's there; the summed CE is −Σ log p(label token) written out; the prepared attention mask
changes no logit."""

import pytest
import torch

from jumplora.data.encode import Encoded, collate
from jumplora.losses import label_logits, prepared_mask, summed_label_ce
from tests.conftest import make_llama, make_t5

EXAMPLES = [Encoded((5, 6, 7, 11), (8, 1), "x"), Encoded((5, 12), (9, 10, 1), "y")]


def test_a_causal_model_scores_each_label_token_at_the_position_before_it():
    model = make_llama()
    batch = collate(EXAMPLES, pad_id=0, causal=True)
    with torch.no_grad():
        logits = label_logits(model, batch)
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (2, 5, 50)
        ce = summed_label_ce(model, batch)
    assert logits.shape == (2, 3, 50)
    # example 0: prompt of 4, so positions 3, 4 predict 8, </s>; example 1: prompt of 2, positions 1, 2, 3
    for row, positions in ((0, [3, 4]), (1, [1, 2, 3])):
        torch.testing.assert_close(logits[row, : len(positions)], full[row, positions])
    log_p = full.log_softmax(-1)
    by_hand = -(log_p[0, 3, 8] + log_p[0, 4, 1] + log_p[1, 1, 9] + log_p[1, 2, 10] + log_p[1, 3, 1])
    torch.testing.assert_close(ce, by_hand)


def test_a_seq2seq_model_reads_the_labels_as_its_decoder_inputs():
    model = make_t5()
    batch = collate(EXAMPLES, pad_id=0)
    with torch.no_grad():
        ce = summed_label_ce(model, batch)
        hf = model(**batch).loss  # the mean over the 5 label tokens
    torch.testing.assert_close(ce, 5 * hf)


@pytest.mark.parametrize("family", ["t5", "causal"])
def test_the_prepared_mask_gives_the_2d_masks_logits_bit_for_bit(family):
    """transformers reads a 2D padding mask back on the host (`padding_mask.all()`); the 4D mask it takes as given
    must compute the same attention: padded rows and an unpadded batch alike."""
    causal = family == "causal"
    model = make_llama() if causal else make_t5()
    for examples in (EXAMPLES, EXAMPLES[:1]):
        batch = collate(examples, pad_id=0, causal=causal)
        assert prepared_mask(model, batch["attention_mask"]).dim() == 4
        plain = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        with torch.no_grad():
            if causal:
                expected = model(**plain, logits_to_keep=batch["label_positions"]).logits
            else:
                expected = model(**plain, labels=batch["labels"]).logits
            assert torch.equal(label_logits(model, batch), expected)
