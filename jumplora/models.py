"""Base models: a hub T5 or local directory, or the `tiny` offline preset built from the benchmark's own texts.

The tiny preset is a small T5 with a Unigram (SentencePiece-style) tokenizer trained on the texts, given a short
seeded pre-training (T5 span corruption, an option-copy objective and the data source's supervised mixture from
`jumplora.data.pretraining`) so that rank-8 adapters on `q`/`v` can learn to answer a task within one epoch.
It is cached under `cache_dir/tiny-<fingerprint>/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import string
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

from jumplora.errors import JumpLoRAError

ADAPTER_TARGETS = ("q", "v")
TINY = "tiny"
FORMAT_VERSION = 1
SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
OPTION_MAX_WORDS = 4
IGNORE_INDEX = -100
OPTION_WEIGHT = 50
OPTION_PREFIX = "Option: "


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the tiny preset: adapted `q`/`v` are d_model x (heads*d_kv), far above rank 8 x (d_in + d_out)."""

    vocab_size: int = 3000
    d_model: int = 128
    d_kv: int = 32
    num_heads: int = 4
    d_ff: int = 512
    num_layers: int = 4
    num_sentinels: int = 32


@dataclass(frozen=True)
class PretrainConfig:
    """The tiny preset's deterministic pre-training of the full base (AdamW, linear warm-up then linear decay)."""

    steps: int = 440
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    dropout_rate: float = 0.0
    max_source_tokens: int = 96
    noise_density: float = 0.15
    mean_span_length: float = 3.0
    copy_fraction: float = 0.5
    real_option_share: float = 0.25
    cooccurrence_window: int = 50
    supervised_fraction: float = 0.75  # share of (prompt, answer) pairs in a batch when the data supplies them
    max_supervised_source_tokens: int = 192


def load_model(
    name_or_path: str,
    *,
    texts: Sequence[str] | None,
    cache_dir: Path,
    seed: int = 0,
    progress: bool = True,
    dropout_rate: float | None = None,
    supervised: Sequence[tuple[str, str]] = (),
    tiny_config: TinyModelConfig = TinyModelConfig(),
    pretrain_config: PretrainConfig = PretrainConfig(),
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `tiny` (built once from `texts`, then cached), a local `save_pretrained` directory or a hub name.

    `dropout_rate` overrides the checkpoint's dropout (None keeps it: 0.1 for T5 and for the tiny preset).
    `supervised` (prompt, answer) pairs join the tiny preset's pre-training mixture, as T5's mixture had tasks.
    """
    overrides = {} if dropout_rate is None else {"dropout_rate": dropout_rate}
    if name_or_path == TINY:
        if texts is None:
            raise JumpLoRAError(
                "the 'tiny' model preset is built from the benchmark texts: pass texts=benchmark.all_texts()"
            )
        name_or_path = str(
            tiny_model_dir(texts, Path(cache_dir), seed, progress, tiny_config, pretrain_config, supervised)
        )
    return _load_pretrained(name_or_path, overrides)


def _load_pretrained(name_or_path: str, overrides: dict) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, dtype=torch.float32, **overrides)
    except (OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise JumpLoRAError(
            f"cannot load model {name_or_path!r} ({reason}): pass 'tiny' for the offline preset, a directory written"
            " by save_pretrained, or a hub name such as google-t5/t5-large on a machine with network access"
        ) from error
    return model, tokenizer


def tiny_model_dir(
    texts: Sequence[str],
    cache_dir: Path,
    seed: int,
    progress: bool,
    tiny_config: TinyModelConfig,
    pretrain_config: PretrainConfig,
    supervised: Sequence[tuple[str, str]] = (),
) -> Path:
    """The cached preset directory, built first (in a staging directory moved into place) when missing."""
    unique_texts = sorted(set(texts))
    supervised = list(supervised)
    target = cache_dir / f"tiny-{_fingerprint(unique_texts, seed, tiny_config, pretrain_config, supervised)}"
    if not target.is_dir():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{target.name}.") as staging:
            built = Path(staging) / target.name
            _build_tiny(built, unique_texts, seed, progress, tiny_config, pretrain_config, supervised)
            _publish(built, target)
    return target


def _fingerprint(
    unique_texts: list[str],
    seed: int,
    tiny_config: TinyModelConfig,
    pretrain: PretrainConfig,
    supervised: list[tuple[str, str]],
) -> str:
    settings = {"format": FORMAT_VERSION, "seed": seed, "model": asdict(tiny_config), "pretrain": asdict(pretrain)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for text in unique_texts:
        digest.update(json.dumps(text).encode())
    for pair in supervised:
        digest.update(json.dumps(pair).encode())
    return digest.hexdigest()[:16]


def _publish(built: Path, target: Path) -> None:
    """Move a finished build into place; a concurrent build that got there first wins."""
    try:
        os.replace(built, target)
    except OSError:
        if not target.is_dir():
            raise
        shutil.rmtree(built)


def _build_tiny(
    out_dir: Path,
    texts: list[str],
    seed: int,
    progress: bool,
    tiny_config: TinyModelConfig,
    pretrain_config: PretrainConfig,
    supervised: list[tuple[str, str]],
) -> None:
    if not texts:
        raise JumpLoRAError("the 'tiny' model preset needs at least one text to build its tokenizer from")
    tokenizer = build_tokenizer(texts, tiny_config)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = T5ForConditionalGeneration(_t5_config(tiny_config, len(tokenizer), pretrain_config.dropout_rate))
        losses = _pretrain(model, tokenizer, texts, supervised, seed, pretrain_config, progress)
    model.config.dropout_rate = 0.1
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "pretraining.json").write_text(json.dumps({"losses": losses}))


def build_tokenizer(texts: Sequence[str], tiny_config: TinyModelConfig) -> PreTrainedTokenizerFast:
    """A case-sensitive Unigram tokenizer over every character of `texts`, appending `</s>`, with T5 sentinels."""
    sentinels = [f"<extra_id_{index}>" for index in range(tiny_config.num_sentinels)]
    tokenizer = Tokenizer(Unigram())
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = UnigramTrainer(
        vocab_size=tiny_config.vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *sentinels],
        unk_token="<unk>",
        show_progress=False,
        initial_alphabet=list(string.printable.strip()),
    )
    tokenizer.train_from_iterator(_tokenizer_corpus(texts), trainer=trainer)
    tokenizer.model = _canonical_unigram(tokenizer, len(SPECIAL_TOKENS) + len(sentinels))
    eos_id = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def _canonical_unigram(tokenizer: Tokenizer, n_special: int) -> Unigram:
    """The trained Unigram model with ids in piece order and scores rounded to 0.1: the trainer returns the same
    pieces in a varying order with score noise (up to ~0.005), which would change ids and tie-breaks between builds."""
    vocab = json.loads(tokenizer.to_str())["model"]["vocab"]
    pieces = sorted((piece, round(score, 1)) for piece, score in vocab[n_special:])
    return Unigram([tuple(entry) for entry in vocab[:n_special]] + pieces, unk_id=SPECIAL_TOKENS.index("<unk>"))


def _tokenizer_corpus(texts: Sequence[str]) -> Iterator[str]:
    """The texts, then the words of answer options listed as in a prompt, repeated: every prompt lists its options."""
    yield from texts
    option_words = sorted({word for text in texts if _is_option(text) for word in text.split()})
    yield from [f"{OPTION_PREFIX}{word}, {word}." for word in option_words] * OPTION_WEIGHT


def _is_option(text: str) -> bool:
    return 0 < len(text.split()) <= OPTION_MAX_WORDS


def _t5_config(tiny_config: TinyModelConfig, vocab_size: int, dropout_rate: float) -> T5Config:
    return T5Config(
        vocab_size=vocab_size,
        d_model=tiny_config.d_model,
        d_kv=tiny_config.d_kv,
        num_heads=tiny_config.num_heads,
        d_ff=tiny_config.d_ff,
        num_layers=tiny_config.num_layers,
        num_decoder_layers=tiny_config.num_layers,
        dropout_rate=dropout_rate,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )


def _pretrain(
    model: T5ForConditionalGeneration,
    tokenizer: PreTrainedTokenizerFast,
    texts: list[str],
    supervised: list[tuple[str, str]],
    seed: int,
    settings: PretrainConfig,
    progress: bool,
) -> list[float]:
    corpus = _Corpus(tokenizer, texts, settings.max_source_tokens, supervised, settings.max_supervised_source_tokens)
    if settings.cooccurrence_window:
        _init_embeddings(model, corpus, settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, settings))
    batches = _pretraining_batches(corpus, random.Random(seed), settings)
    model.train()
    losses = []
    for _ in (bar := tqdm(range(settings.steps), desc="pre-training tiny T5", disable=not progress)):
        loss = model(**next(batches)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return losses


def _init_embeddings(model, corpus, settings):
    vocab_size = model.config.vocab_size
    counts = _cooccurrence_counts(corpus.token_ids, vocab_size, settings.cooccurrence_window)
    total, marginal = counts.sum(), counts.sum(1)
    pmi = torch.where(counts > 0, torch.log(counts * total / torch.outer(marginal, marginal)), 0.0).clamp(min=0)
    u, s, _ = torch.svd_lowrank(pmi, q=model.config.d_model, niter=4)
    emb = (u * s.sqrt()).float()
    seen = marginal > 0
    emb = emb / emb[seen].std()
    with torch.no_grad():
        model.shared.weight[seen] = emb[seen]


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


def _pretraining_batches(corpus, rng: random.Random, settings: PretrainConfig) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        pairs = [_pretraining_pair(corpus, rng, settings) for _ in range(settings.batch_size)]
        yield _collate(pairs)


class _Corpus:
    """The texts as token ids (without `</s>`), short texts and word n-grams usable as answer options, and the
    supervised (prompt, answer) pairs as token ids."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        texts: list[str],
        max_source_tokens: int,
        supervised: list[tuple[str, str]],
        max_supervised_source_tokens: int,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_source_tokens = max_source_tokens
        self.texts = texts
        self.token_ids = [ids for ids in tokenizer(texts, add_special_tokens=False)["input_ids"] if ids]
        self.options = [text.strip() for text in texts if _is_option(text)]
        self.sentinel_ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(32)])
        self.eos_id = tokenizer.eos_token_id
        self.supervised: list[tuple[list[int], list[int]]] = []
        if supervised:
            sources, answers = zip(*supervised, strict=True)
            encoded = tokenizer(list(sources), text_target=list(answers), truncation=True,
                                max_length=max_supervised_source_tokens)
            self.supervised = list(zip(encoded["input_ids"], encoded["labels"], strict=True))

    def window(self, rng: random.Random, length: int) -> list[int]:
        ids = rng.choice(self.token_ids)
        start = rng.randrange(max(1, len(ids) - length + 1))
        return ids[start : start + length]

    def option(self, rng: random.Random, real_share: float) -> str:
        if self.options and rng.random() < real_share:
            return rng.choice(self.options)
        words = rng.choice(self.texts).split()
        length = rng.randint(1, min(3, len(words)))
        start = rng.randrange(len(words) - length + 1)
        return " ".join(words[start : start + length])


def _pretraining_pair(corpus: _Corpus, rng: random.Random, settings: PretrainConfig) -> tuple[list[int], list[int]]:
    if corpus.supervised and rng.random() < settings.supervised_fraction:
        return rng.choice(corpus.supervised)
    if rng.random() < settings.copy_fraction:
        return _option_copy_pair(corpus, rng, settings)
    return _span_corruption_pair(corpus.window(rng, settings.max_source_tokens), corpus, rng, settings)


def _span_corruption_pair(
    ids: list[int], corpus: _Corpus, rng: random.Random, settings: PretrainConfig
) -> tuple[list[int], list[int]]:
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
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [end - start for start, end in zip(bounds, bounds[1:], strict=False)]


def _option_copy_pair(corpus: _Corpus, rng: random.Random, settings: PretrainConfig) -> tuple[list[int], list[int]]:
    """A prompt shaped like the tasks' (context, comma-separated options, passage) answered by one option."""
    options = list(dict.fromkeys(corpus.option(rng, settings.real_option_share) for _ in range(rng.randint(2, 6))))
    answer = rng.choice(options)
    instruction = corpus.tokenizer.decode(corpus.window(rng, rng.randint(6, 20)))
    passage = corpus.tokenizer.decode(corpus.window(rng, corpus.max_source_tokens // 2))
    source = f"{instruction}\n{OPTION_PREFIX}{', '.join(options)}\n{passage}"
    encoded = corpus.tokenizer(source, text_target=answer, truncation=True, max_length=corpus.max_source_tokens)
    return encoded["input_ids"], encoded["labels"]


def _collate(pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    source_length = max(len(source) for source, _ in pairs)
    target_length = max(len(target) for _, target in pairs)
    input_ids = torch.tensor([source + [0] * (source_length - len(source)) for source, _ in pairs])
    labels = torch.tensor([target + [IGNORE_INDEX] * (target_length - len(target)) for _, target in pairs])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}
