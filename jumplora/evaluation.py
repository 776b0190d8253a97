"""Exact-match accuracy of greedy decoding (SPEC §4) on a merged (plain) model, seq2seq or causal, by two routes that
give the same flags (docs/DECISIONS.md, "Fast exact match"): `generate`, greedy decoding of ≤ 8 new tokens (a causal
model's answer: the tokens after its left-padded prompt), normalised and compared with the normalised label; and `fast`
(default), one teacher-forced pass over the label tokens, deciding an example from its argmax path unless the path
leaves the label at k with a token g while normalise(decode(label[:k] + g)) is still a prefix of the normalised label,
or has a near tie (`TIE_MARGIN`; `BF16_TIE_MARGIN` for bf16 logits): those few go to `generate`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import GenerationConfig

from jumplora.config import EVAL_MODES
from jumplora.data.encode import Encoded, collate, length_sorted_batches, normalise_answer, prompt_batch
from jumplora.families import is_causal
from jumplora.losses import label_logits
from jumplora.precision import autocast, frozen_in_bf16

MAX_NEW_TOKENS = 8
TIE_MARGIN = 1e-4
BF16_TIE_MARGIN = 2.0**-5  # relative to |top logit|, for bf16 logits: 4 units in their last place (2^-8 to 2^-7)


def generate_answers(model, tokenizer, examples: list[Encoded], device, causal: bool) -> list[str]:
    """Greedy decoding of ≤ `MAX_NEW_TOKENS` new tokens after each example's source, decoded (not normalised)."""
    batch = prompt_batch(examples, tokenizer.pad_token_id, device, causal=causal)
    # plain greedy decoding whatever the checkpoint's generation_config says (an instruct model's sampling,
    # repetition penalty or extra stop ids would break its equality with the teacher-forced route)
    greedy = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                              decoder_start_token_id=model.generation_config.decoder_start_token_id)
    generated = model.generate(**batch, generation_config=greedy)
    if causal:  # (B, L_prompt + new): the prompt comes back first
        generated = generated[:, batch["input_ids"].shape[1]:]
    return tokenizer.batch_decode(generated, skip_special_tokens=True)


def _generate_flags(model, tokenizer, examples: list[Encoded], device, causal: bool) -> list[bool]:
    answers = generate_answers(model, tokenizer, examples, device, causal)
    return [normalise_answer(a) == normalise_answer(e.label) for a, e in zip(answers, examples, strict=True)]


def _label_path(model, batch: dict[str, torch.Tensor], width: int) -> torch.Tensor:
    """(B, width, 2) on the device: per label position, the argmax token and whether the top-2 logit gap is below
    the margin (1, else 0; `TIE_MARGIN`, or `BF16_TIE_MARGIN` for bf16 logits); zeros beyond the label length."""
    logits = label_logits(model, batch)  # (B, L_tgt, V): position i predicts label token i given label[:i]
    top2 = logits.float().topk(2, dim=-1)
    best = top2.values[..., 0]
    margin = TIE_MARGIN if logits.dtype == torch.float32 else BF16_TIE_MARGIN * best.abs()
    tied = (best - top2.values[..., 1]) < margin
    path = torch.stack([top2.indices[..., 0], tied.long()], dim=-1)
    return F.pad(path, (0, 0, 0, width - path.shape[1]))


def _teacher_forced_verdicts(tokenizer, paths: list[list[list[int]]], examples: list[Encoded]) -> list[bool | None]:
    """True/False where one teacher-forced pass decides the example; None where `generate` must decide. `paths`:
    per example, (argmax token, tied) per label position (`_label_path`, read back)."""
    verdicts: list[bool | None] = []
    for rows, example in zip(paths, examples, strict=True):
        target = list(example.label_ids)  # label tokens + </s>
        # a cut label (greedy may stop anywhere within 8 tokens) or a near tie on the path: `generate` decides
        if len(target) > MAX_NEW_TOKENS or any(tied for _, tied in rows[: len(target)]):
            verdicts.append(None)
            continue
        path = [token for token, _ in rows[: len(target)]]
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
                      desc: str = "eval", progress: bool = True, mode: str = "fast",
                      precision: str = "fp32") -> list[bool]:
    """For each example (in input order): does the greedy answer (≤ 8 new tokens) normalise to the label?

    Batches hold examples of similar source length; with `precision` "bf16" both routes run as training does
    (`precision.frozen_in_bf16`). The fast route reads the whole evaluation's label paths back in one transfer, then
    decodes the examples they cannot decide with `generate`, batch by batch.
    """
    if mode not in EVAL_MODES:
        raise ValueError(f"eval mode must be one of {EVAL_MODES}, got {mode!r}")
    was_training = model.training
    model.eval()
    flags = [False] * len(encoded)
    causal = is_causal(model)
    batches = length_sorted_batches(encoded, batch_size)
    fast = mode == "fast"  # else every example undecided: `generate` decides each, batch by batch
    with autocast(device, precision), frozen_in_bf16(model, precision == "bf16"):
        if fast:
            width = max((len(e.label_ids) for e in encoded), default=0)
            paths = [_label_path(model, collate([encoded[i] for i in idx], tokenizer.pad_token_id, device,
                                                causal=causal), width)
                     for idx in tqdm(batches, desc=desc, disable=not progress, leave=False)]
            paths = torch.cat(paths).cpu().tolist() if paths else []  # the one device → host read
        start = 0
        for idx in tqdm(batches, desc=desc, disable=fast or not progress, leave=False):
            examples = [encoded[i] for i in idx]
            verdicts = _teacher_forced_verdicts(tokenizer, paths[start : start + len(idx)], examples) if fast else \
                [None] * len(idx)
            start += len(idx)
            undecided = [example for example, verdict in zip(examples, verdicts, strict=True) if verdict is None]
            decided = iter(_generate_flags(model, tokenizer, undecided, device, causal) if undecided else [])
            for i, verdict in zip(idx, verdicts, strict=True):
                flags[i] = bool(next(decided) if verdict is None else verdict)
    model.train(was_training)
    return flags
