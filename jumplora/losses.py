"""The label log-likelihood that training (CE), EWC's Fisher information and fast evaluation share."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from jumplora.data.encode import IGNORE_INDEX


def label_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, L_tgt, V) logits lined up with `batch["labels"]` (`encode.collate`): position j predicts label token j.

    A seq2seq model reads the labels as its decoder's inputs. A causal model projects only the positions that
    predict a label token onto its vocabulary (`logits_to_keep`; a paper-scale vocabulary over every prompt position
    would take GBs), and is not given the labels (it would compute an unused loss of its own).
    """
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if model.config.is_encoder_decoder:
        return model(**inputs, labels=batch["labels"]).logits
    return model(**inputs, logits_to_keep=batch["label_positions"]).logits


def summed_label_ce(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Σ of token CE over the batch's label tokens, −log p(label | source) summed over the batch (not the mean, so
    shards of a global batch add up exactly)."""
    logits = label_logits(model, batch)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum")
