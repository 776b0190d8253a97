"""The tiny presets' pre-training: T5 span corruption, an option-copy objective and the supervised mixture, from
embeddings initialised by a factorised co-occurrence (PPMI) matrix of the corpus. Every objective is a (source,
target) pair; the causal model reads it as a prompt (the source without `</s>`) followed by its answer, and learns
the answer and the prompt's next tokens (`_causal_loss`; adapters later train on the answer only)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from jumplora.data.encode import IGNORE_INDEX, Encoded, PromptEncoder, collate
from jumplora.data.types import Example, TaskSpec
from jumplora.losses import label_logits
from jumplora.tiny.corpus import Corpus

if TYPE_CHECKING:
    from jumplora.tiny import PretrainConfig


def train(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, texts: list[str],
          supervised: list[tuple[str, str]], seed: int, settings: PretrainConfig, progress: bool) -> list[float]:
    """Pre-train the whole `model` in place for `settings.steps` seeded batches; returns the loss of each step."""
    corpus = Corpus(tokenizer, texts, supervised, settings.max_supervised_source_tokens)
    if settings.cooccurrence_window:
        _init_embeddings(model, corpus, settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, settings))
    causal = not model.config.is_encoder_decoder
    batches = _pretraining_batches(corpus, random.Random(seed), settings, causal)
    model.train()
    losses = []
    desc = f"pre-training tiny {'causal LM' if causal else 'T5'}"
    for _ in (bar := tqdm(range(settings.steps), desc=desc, disable=not progress)):
        batch = next(batches)
        loss = _causal_loss(model, batch) if causal else model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return losses


def _causal_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean CE over the answers' tokens + mean CE over the prompts' tokens (next-token prediction of the text: what
    T5's span corruption gives its encoder; the answers alone left the base at chance on its own supervised pairs)."""
    logits = label_logits(model, batch)  # (B, L - 1, V): every position after the first predicts its next token
    ce = F.cross_entropy(logits.transpose(1, 2).float(), batch["labels"], ignore_index=IGNORE_INDEX, reduction="none")
    answer, prompt = batch["answer_mask"], (batch["labels"] != IGNORE_INDEX) & ~batch["answer_mask"]
    return ce[answer].mean() + ce[prompt].mean()


def _init_embeddings(model, corpus, settings):
    vocab_size = model.config.vocab_size
    counts = _cooccurrence_counts(corpus.token_ids, vocab_size, settings.cooccurrence_window)
    total, marginal = counts.sum(), counts.sum(1)
    pmi = torch.where(counts > 0, torch.log(counts * total / torch.outer(marginal, marginal)), 0.0).clamp(min=0)
    embeddings = model.get_input_embeddings().weight  # (V, d_model)
    u, s, _ = torch.svd_lowrank(pmi, q=embeddings.shape[1], niter=4)
    emb = (u * s.sqrt()).float()
    seen = marginal > 0
    emb = emb / emb[seen].std()
    with torch.no_grad():
        embeddings[seen] = emb[seen]


def _cooccurrence_counts(token_ids, vocab_size, window):
    flat = torch.tensor([t for ids in token_ids for t in ids])
    doc = torch.repeat_interleave(torch.arange(len(token_ids)), torch.tensor([len(ids) for ids in token_ids]))
    counts = torch.zeros(vocab_size * vocab_size, dtype=torch.float64)
    for offset in range(1, window + 1):
        same = doc[:-offset] == doc[offset:]
        counts += torch.bincount(flat[:-offset][same] * vocab_size + flat[offset:][same], minlength=vocab_size**2)
    counts = counts.view(vocab_size, vocab_size)
    return counts + counts.T


def _lr_factor(step: int, settings: PretrainConfig) -> float:
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    return max(0.0, (settings.steps - step) / max(1, settings.steps - settings.warmup_steps))


def _pretraining_batches(corpus, rng: random.Random, settings: PretrainConfig,
                         causal: bool) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        pairs = [_pretraining_pair(corpus, rng, settings) for _ in range(settings.batch_size)]
        if not causal:
            yield collate([Encoded(tuple(source), tuple(target), "") for source, target in pairs], 0)
            continue
        # the prompt is the source without its </s>; every token after the first is a label (see _causal_loss)
        pairs = [(source[:-1] if source[-1] == corpus.eos_id else source, target) for source, target in pairs]
        batch = collate([Encoded(tuple(prompt[:1]), tuple(prompt[1:] + target), "") for prompt, target in pairs], 0,
                        causal=True)
        answer = [[False] * (len(prompt) - 1) + [True] * len(target) for prompt, target in pairs]
        width = batch["labels"].shape[1]
        batch["answer_mask"] = torch.tensor([row + [False] * (width - len(row)) for row in answer])
        yield batch


def _pretraining_pair(corpus: Corpus, rng: random.Random, settings: PretrainConfig) -> tuple[list[int], list[int]]:
    if corpus.supervised and rng.random() < settings.supervised_fraction:
        return rng.choice(corpus.supervised)
    if rng.random() < settings.copy_fraction:
        return _option_copy_pair(corpus, rng, settings)
    return _span_corruption_pair(corpus.window(rng, settings.max_source_tokens), corpus, rng, settings)


def _span_corruption_pair(ids: list[int], corpus: Corpus, rng: random.Random,
                          settings: PretrainConfig) -> tuple[list[int], list[int]]:
    """T5's objective: random spans become sentinels in the source; the target lists each sentinel and its span."""
    noise = _noise_mask(len(ids), rng, settings)
    source, target, span = [], [], -1
    for position, token in enumerate(ids):
        if not noise[position]:
            source.append(token)
            continue
        if position == 0 or not noise[position - 1]:
            span += 1
            source.append(corpus.sentinel_ids[min(span, len(corpus.sentinel_ids) - 1)])
            target.append(source[-1])
        target.append(token)
    return source + [corpus.eos_id], target + [corpus.eos_id]


def _noise_mask(length: int, rng: random.Random, settings: PretrainConfig) -> list[bool]:
    """T5's random_spans_noise_mask: alternate non-noise and noise spans of random lengths."""
    num_noise = min(max(1, round(length * settings.noise_density)), length - 1)
    num_spans = max(1, min(round(num_noise / settings.mean_span_length), num_noise, length - num_noise))
    noise_lengths = _random_segmentation(num_noise, num_spans, rng)
    keep_lengths = _random_segmentation(length - num_noise, num_spans, rng)
    mask: list[bool] = []
    for keep, drop in zip(keep_lengths, noise_lengths, strict=True):
        mask += [False] * keep + [True] * drop
    return mask


def _random_segmentation(total: int, parts: int, rng: random.Random) -> list[int]:
    bounds = [0, *sorted(rng.sample(range(1, total), parts - 1)), total]  # (one part: no draw)
    return [end - start for start, end in zip(bounds, bounds[1:], strict=False)]


def _option_copy_pair(corpus: Corpus, rng: random.Random, settings: PretrainConfig) -> tuple[list[int], list[int]]:
    """A prompt in the tasks' template (`encode.prompt_source`: a random context as the instruction, the options, a
    passage as the text) answered by one of its options, encoded as the tasks' are (only the passage is cut)."""
    options = list(dict.fromkeys(corpus.option(rng, settings.real_option_share) for _ in range(rng.randint(2, 6))))
    answer = rng.choice(options)
    instruction = corpus.tokenizer.decode(corpus.window(rng, rng.randint(6, 20)))
    passage = corpus.tokenizer.decode(corpus.window(rng, settings.max_source_tokens // 2))
    spec = TaskSpec("option-copy", f"{instruction}\n", tuple(options))
    encoded = PromptEncoder(corpus.tokenizer, settings.max_source_tokens).encode(spec, Example(passage, answer))
    return list(encoded.input_ids), list(encoded.label_ids)
