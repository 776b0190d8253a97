"""Exact-match accuracy of greedy decoding (SPEC §4) on a merged (plain) model."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from jumplora.data.encode import Encoded, collate, length_sorted_batches, normalise_answer

MAX_NEW_TOKENS = 8


@torch.no_grad()
def exact_match_flags(model, tokenizer, encoded: list[Encoded], *, batch_size: int = 64, device="cpu",
                      desc: str = "eval", progress: bool = True) -> list[bool]:
    """For each example (in input order): does the greedy answer (≤ 8 new tokens) normalise to the label?"""
    was_training = model.training
    model.eval()
    flags = [False] * len(encoded)
    batches = length_sorted_batches(encoded, batch_size)
    for batch_idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
        batch = collate([encoded[i] for i in batch_idx], tokenizer.pad_token_id, device)
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
        answers = tokenizer.batch_decode(generated, skip_special_tokens=True)
        for i, answer in zip(batch_idx, answers, strict=True):
            flags[i] = normalise_answer(answer) == normalise_answer(encoded[i].label)
    model.train(was_training)
    return flags


def accuracy(model, tokenizer, encoded: list[Encoded], **kwargs) -> float:
    flags = exact_match_flags(model, tokenizer, encoded, **kwargs)
    return sum(flags) / len(flags) if flags else 0.0
