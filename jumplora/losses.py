"""The label log-likelihood that training (CE), EWC's Fisher information and fast evaluation share."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from jumplora.data.encode import IGNORE_INDEX


def prepared_mask(model, attention_mask: torch.Tensor) -> torch.Tensor:
    """The (B, L) padding mask as the 4D boolean mask that transformers' SDPA attention takes as given, built with
    device ops only (a 2D one costs a host read per mask and forward: docs/DECISIONS.md, "No host sync"): seq2seq
    (B, 1, 1, L), True where a source token is attended; causal (B, 1, L, L), the causal mask and the padding. Other
    attention implementations keep the 2D mask."""
    if model.config._attn_implementation != "sdpa":
        return attention_mask
    rows = attention_mask.bool()[:, None, None, :]
    if model.config.is_encoder_decoder:
        return rows
    length = attention_mask.shape[1]
    return rows & torch.ones(length, length, dtype=torch.bool, device=attention_mask.device).tril()


def label_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, L_tgt, V) logits lined up with `batch["labels"]` (`encode.collate`): position j predicts label token j.
    A seq2seq model's decoder reads the labels shifted right (as `decoder_input_ids`: the model computes no loss); a
    causal model projects only the positions that predict a label token (`logits_to_keep`: a paper-scale vocabulary
    over every prompt position would take GBs). No key/value cache (one pass); the mask is `prepared_mask`'s."""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": prepared_mask(model, batch["attention_mask"]),
              "use_cache": False}
    if model.config.is_encoder_decoder:
        decoder_inputs = model.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
        return model(**inputs, decoder_input_ids=decoder_inputs).logits
    return model(**inputs, logits_to_keep=batch["label_positions"]).logits


def summed_label_ce(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Σ of token CE over the batch's label tokens, −log p(label | source) summed over the batch (not the mean, so
    shards of a global batch add up exactly)."""
    return label_ce(label_logits(model, batch), batch["labels"])


def label_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Σ of token CE of (B, L_tgt, V) logits against their (B, L_tgt) labels, in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


def copies_label_ce(model, batch: dict[str, torch.Tensor], copies: int) -> list[torch.Tensor]:
    """`summed_label_ce` of each of the `copies` blocks of a batch of K copies (`step_modes.OneForward`),
    from one forward: each the very sum one copy alone gives."""
    labels = batch["labels"].chunk(copies)
    return [label_ce(logits, labels[k]) for k, logits in enumerate(label_logits(model, batch).chunk(copies))]
