"""Exact-match accuracy of greedy decoding (SPEC §4) on a merged (plain) model.

Two routes give the same flags:
- `generate`: greedy decoding of ≤ 8 new tokens, decoded, normalised, compared with the normalised label.
- `fast` (default): one teacher-forced decoder pass over the label tokens. Greedy decoding reproduces the label's
  tokens iff the argmax at every label position is the next label token and then end-of-sequence; those examples
  are decided without decoding. Where the argmax path leaves the label at position k with token g, greedy output
  starts with `label[:k] + g`; since normalisation (strip, lower-case, collapse whitespace) maps a prefix of a
  string to a prefix of its normal form, the example can only match if normalise(decode(label[:k] + g)) is a prefix
  of the normalised label: those few examples (another tokenisation or case of the same answer) are decided by
  `generate`, the rest are wrong. Positions whose top-2 logit gap is below `TIE_MARGIN` also go to `generate`, so
  float differences between the cached and the teacher-forced decoder cannot flip a decision.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from jumplora.data.encode import Encoded, collate, length_sorted_batches, normalise_answer

MAX_NEW_TOKENS = 8
TIE_MARGIN = 1e-4
EVAL_MODES = ("fast", "generate")


def _generate_flags(model, tokenizer, batch: dict[str, torch.Tensor], labels: list[str]) -> list[bool]:
    generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
    answers = tokenizer.batch_decode(generated, skip_special_tokens=True)
    return [normalise_answer(a) == normalise_answer(label) for a, label in zip(answers, labels, strict=True)]


def _teacher_forced_verdicts(model, tokenizer, batch: dict[str, torch.Tensor],
                             examples: list[Encoded]) -> list[bool | None]:
    """True/False where one decoder pass decides the example; None where `generate` must decide."""
    logits = model(**batch).logits  # (B, L_tgt, V): position i predicts label token i given label[:i]
    top2 = logits.topk(2, dim=-1)
    predicted, gap = top2.indices[..., 0], top2.values[..., 0] - top2.values[..., 1]
    verdicts: list[bool | None] = []
    for row, example in enumerate(examples):
        target = list(example.label_ids)  # label tokens + </s>
        if len(target) > MAX_NEW_TOKENS:  # cut label: greedy may stop anywhere within 8 tokens
            verdicts.append(None)
            continue
        path = predicted[row, : len(target)].tolist()
        if bool((gap[row, : len(target)] < TIE_MARGIN).any()):
            verdicts.append(None)
            continue
        normal_label = normalise_answer(example.label)
        k = next((i for i, (p, t) in enumerate(zip(path, target, strict=True)) if p != t), None)
        if k is None:  # greedy emits exactly the label's tokens, then </s>
            verdicts.append(normalise_answer(tokenizer.decode(target, skip_special_tokens=True)) == normal_label)
        elif path[k] == tokenizer.eos_token_id:  # greedy stops after label[:k]
            verdicts.append(normalise_answer(tokenizer.decode(target[:k], skip_special_tokens=True)) == normal_label)
        else:
            prefix = normalise_answer(tokenizer.decode(target[:k] + [path[k]], skip_special_tokens=True))
            verdicts.append(None if normal_label.startswith(prefix) else False)
    return verdicts


@torch.no_grad()
def exact_match_flags(model, tokenizer, encoded: list[Encoded], *, batch_size: int = 64, device="cpu",
                      desc: str = "eval", progress: bool = True, mode: str = "fast") -> list[bool]:
    """For each example (in input order): does the greedy answer (≤ 8 new tokens) normalise to the label?"""
    if mode not in EVAL_MODES:
        raise ValueError(f"eval mode must be one of {EVAL_MODES}, got {mode!r}")
    was_training = model.training
    model.eval()
    flags = [False] * len(encoded)
    for batch_idx in tqdm(length_sorted_batches(encoded, batch_size), desc=desc, disable=not progress, leave=False):
        examples = [encoded[i] for i in batch_idx]
        batch = collate(examples, tokenizer.pad_token_id, device)  # input_ids (B, L_src), labels (B, L_tgt)
        if mode == "generate":
            verdicts = _generate_flags(model, tokenizer, batch, [e.label for e in examples])
        else:
            verdicts = _teacher_forced_verdicts(model, tokenizer, batch, examples)
            undecided = [row for row, verdict in enumerate(verdicts) if verdict is None]
            if undecided:
                sub = {key: value[undecided] for key, value in batch.items()}
                for row, flag in zip(undecided, _generate_flags(model, tokenizer, sub,
                                                                [examples[r].label for r in undecided]), strict=True):
                    verdicts[row] = flag
        for i, verdict in zip(batch_idx, verdicts, strict=True):
            flags[i] = bool(verdict)
    model.train(was_training)
    return flags


def accuracy(model, tokenizer, encoded: list[Encoded], **kwargs) -> float:
    flags = exact_match_flags(model, tokenizer, encoded, **kwargs)
    return sum(flags) / len(flags) if flags else 0.0
