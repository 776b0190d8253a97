"""The label log-likelihood that training (CE) and EWC's Fisher information share."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from jumplora.data.encode import IGNORE_INDEX


def summed_label_ce(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Σ of token CE over the batch's label tokens, −log p(label | source) summed over the batch (not the mean, so
    shards of a global batch add up exactly)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum")
