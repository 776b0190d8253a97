"""Base models: a hub T5 or a local `save_pretrained` directory, or the `tiny` offline preset.

The tiny preset is a small T5 built from the benchmark's own texts, cached under `cache_dir/tiny-<fingerprint>/`:
1. a case-sensitive Unigram tokenizer (SentencePiece-style, Metaspace) with T5's special tokens and sentinels;
2. token embeddings initialised from the SVD of the texts' positive PMI co-occurrence matrix, so that words used
   alike start out alike (what a large pre-trained model brings, and what rank-8 adapters cannot learn in a few
   dozen steps);
3. a short seeded pre-training of the whole model (AdamW) mixing T5 span corruption with an option-copy
   objective: prompts laid out like the tasks' (instruction, `Option: a, b, …`, passage, `Answer:`) answered by
   one of the listed options, so that the base already answers with an option and an adapter only has to learn
   which one.
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

from jumplora.data.encode import ANSWER_SUFFIX, prompt_prefix
from jumplora.data.types import TaskSpec
from jumplora.errors import JumpLoRAError

ADAPTER_TARGETS = ("q", "v")
TINY = "tiny"
FORMAT_VERSION = 2
SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
IGNORE_INDEX = -100
OPTION_MAX_WORDS = 4  # a text this short is taken for an answer option
OPTION_WEIGHT = 50  # option words are repeated in the tokenizer corpus: every prompt lists them
MAX_LISTED_OPTIONS = 10
TOKENIZER_MAX_CHARS = 4_000_000  # the tokenizer is trained on a sample of the texts of about this size
CORPUS_MAX_TEXTS = 20_000  # pre-training and co-occurrence statistics use a sample of this many texts


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the tiny preset: the adapted `q`/`v` (d_model x heads*d_kv) are far above rank 8 x (d_in + d_out)."""

    vocab_size: int = 3000
    d_model: int = 128
    d_kv: int = 32
    num_heads: int = 4
    d_ff: int = 512
    num_layers: int = 4
    num_sentinels: int = 32
    dropout_rate: float = 0.1  # stored in the saved config: the dropout of fine-tuning


@dataclass(frozen=True)
class PretrainConfig:
    """The preset's pre-training: AdamW with linear warm-up and linear decay, gradient norm clipped to 1."""

    steps: int = 200
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    dropout_rate: float = 0.0
    max_source_tokens: int = 96
    cooccurrence_window: int = 50
    copy_fraction: float = 0.5
    noise_density: float = 0.15
    mean_span_length: float = 3.0
    answer_in_passage: bool = False


def load_model(
    name_or_path: str,
    *,
    texts: Sequence[str] | None,
    cache_dir: Path,
    seed: int = 0,
    progress: bool = True,
    dropout_rate: float | None = None,
    tiny_config: TinyModelConfig = TinyModelConfig(),
    pretrain_config: PretrainConfig = PretrainConfig(),
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`tiny` (built from `texts` once, then loaded from `cache_dir`), a `save_pretrained` directory or a hub name.

    `dropout_rate` overrides the checkpoint's dropout; None keeps it (0.1 for T5 and the tiny preset).
    """
    if name_or_path == TINY:
        if texts is None:
            raise JumpLoRAError(
                "the 'tiny' preset is built from the benchmark texts: pass texts=benchmark.all_texts()"
            )
        name_or_path = str(tiny_model_dir(texts, Path(cache_dir), seed, progress, tiny_config, pretrain_config))
    return _load_pretrained(name_or_path, {} if dropout_rate is None else {"dropout_rate": dropout_rate})


def _load_pretrained(name_or_path: str, overrides: dict) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, dtype=torch.float32, **overrides)
    except (OSError, ValueError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
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
) -> Path:
    """The cached preset; a missing one is built in a staging directory, then moved into place in one step."""
    unique_texts = sorted({text for text in texts if text.strip()})
    if not unique_texts:
        raise JumpLoRAError("the 'tiny' preset needs texts to build its tokenizer from: got none that are not blank")
    target = cache_dir / f"tiny-{_fingerprint(unique_texts, seed, tiny_config, pretrain_config)}"
    if not target.is_dir():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{target.name}.") as staging:
            built = Path(staging) / target.name
            _build_tiny(built, unique_texts, seed, progress, tiny_config, pretrain_config)
            _publish(built, target)
    return target


def _fingerprint(unique_texts: list[str], seed: int, tiny_config: TinyModelConfig, pretrain: PretrainConfig) -> str:
    settings = {"format": FORMAT_VERSION, "seed": seed, "model": asdict(tiny_config), "pretrain": asdict(pretrain)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update(_prompt("instruction\n", ["a", "b"], "passage").encode())
    for text in unique_texts:
        digest.update(json.dumps(text).encode())
    return digest.hexdigest()[:16]


def _publish(built: Path, target: Path) -> None:
    """Move a finished build into place; when a concurrent build got there first, keep that one."""
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
) -> None:
    tokenizer = build_tokenizer(_sample_by_chars(texts, random.Random(seed)), tiny_config)
    corpus = _Corpus(
        tokenizer, texts, pretrain_config.max_source_tokens, tiny_config.num_sentinels, random.Random(seed)
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = T5ForConditionalGeneration(_t5_config(tiny_config, len(tokenizer), pretrain_config.dropout_rate))
        _init_embeddings(model.shared.weight, corpus.token_ids, pretrain_config.cooccurrence_window)
        losses = _pretrain(model, corpus, random.Random(seed), pretrain_config, progress)
    model.config.dropout_rate = tiny_config.dropout_rate
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "pretraining.json").write_text(json.dumps({"losses": losses}))


def _sample_by_chars(texts: list[str], rng: random.Random) -> list[str]:
    """Every option-like text, then a random sample of the others up to TOKENIZER_MAX_CHARS characters."""
    sample = [text for text in texts if _is_option(text)]
    size = sum(map(len, sample))
    for text in rng.sample(texts, len(texts)):
        if size >= TOKENIZER_MAX_CHARS:
            break
        if not _is_option(text):
            sample.append(text)
            size += len(text)
    return sample


def build_tokenizer(texts: Sequence[str], tiny_config: TinyModelConfig) -> PreTrainedTokenizerFast:
    """A case-sensitive Unigram tokenizer over `texts` and printable ASCII, appending `</s>`, with T5 sentinels."""
    sentinels = [_sentinel(index) for index in range(tiny_config.num_sentinels)]
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
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def _sentinel(index: int) -> str:
    return f"<extra_id_{index}>"


def _canonical_unigram(tokenizer: Tokenizer, n_special: int) -> Unigram:
    """The trained Unigram model with ids in piece order and scores rounded to 0.1: the trainer returns the same
    pieces in a varying order with score noise (up to ~0.005), which would change ids and tie-breaks between builds."""
    vocab = json.loads(tokenizer.to_str())["model"]["vocab"]
    pieces = sorted((piece, round(score, 1)) for piece, score in vocab[n_special:])
    return Unigram([tuple(entry) for entry in vocab[:n_special]] + pieces, unk_id=SPECIAL_TOKENS.index("<unk>"))


def _tokenizer_corpus(texts: Sequence[str]) -> Iterator[str]:
    """The texts, then the words of answer options listed as in a prompt, repeated: every prompt lists its options.

    (A Unigram seed piece must occur inside two distinct words, hence `word,` next to `word.`.)
    """
    yield from texts
    option_words = sorted({word for text in texts if _is_option(text) for word in text.split()})
    yield from [f"Option: {word}, {word}." for word in option_words] * OPTION_WEIGHT


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


class _Corpus:
    """A sample of the texts as token ids (no `</s>`, at most `max_source_tokens`), and the answer options."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerFast, texts: list[str], max_source_tokens: int, num_sentinels: int, rng
    ) -> None:
        sample = rng.sample(texts, min(len(texts), CORPUS_MAX_TEXTS))
        encoded = tokenizer(sample, add_special_tokens=False, truncation=True, max_length=max_source_tokens)
        self.tokenizer = tokenizer
        self.max_source_tokens = max_source_tokens
        self.token_ids = [ids for ids in encoded["input_ids"] if ids]
        self.options = [text.strip() for text in texts if _is_option(text)]
        self.sentinel_ids = tokenizer.convert_tokens_to_ids([_sentinel(index) for index in range(num_sentinels)])

    def window(self, rng: random.Random, length: int) -> list[int]:
        ids = rng.choice(self.token_ids)
        start = rng.randrange(max(1, len(ids) - length + 1))
        return ids[start : start + length]

    def text(self, rng: random.Random, length: int) -> str:
        return self.tokenizer.decode(self.window(rng, length))


@torch.no_grad()
def _init_embeddings(embedding: torch.Tensor, token_ids: list[list[int]], window: int) -> None:
    """Rows of tokens seen in `token_ids` become their PPMI-SVD vectors, scaled to T5's initial std of 1."""
    counts = _cooccurrence_counts(token_ids, embedding.shape[0], window)
    total, marginal = counts.sum(), counts.sum(dim=1)
    ppmi = torch.where(counts > 0, torch.log(counts * total / torch.outer(marginal, marginal)), 0.0).clamp(min=0)
    u, s, _ = torch.svd_lowrank(ppmi, q=embedding.shape[1], niter=4)
    vectors = (u * s.sqrt()).float()
    seen = marginal > 0
    embedding[seen] = vectors[seen] / vectors[seen].std()


def _cooccurrence_counts(token_ids: list[list[int]], vocab_size: int, window: int) -> torch.Tensor:
    """Symmetric counts of token pairs at most `window` positions apart within one text."""
    flat = torch.tensor([token for ids in token_ids for token in ids])
    text_of = torch.repeat_interleave(torch.arange(len(token_ids)), torch.tensor([len(ids) for ids in token_ids]))
    counts = torch.zeros(vocab_size * vocab_size, dtype=torch.float64)
    for offset in range(1, window + 1):
        same_text = text_of[:-offset] == text_of[offset:]
        pairs = flat[:-offset][same_text] * vocab_size + flat[offset:][same_text]
        counts += torch.bincount(pairs, minlength=vocab_size * vocab_size)
    counts = counts.view(vocab_size, vocab_size)
    return counts + counts.T


def _pretrain(
    model: T5ForConditionalGeneration,
    corpus: _Corpus,
    rng: random.Random,
    settings: PretrainConfig,
    progress: bool,
) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, settings))
    model.train()
    losses = []
    for _ in (bar := tqdm(range(settings.steps), desc="pre-training the tiny T5", disable=not progress)):
        pairs = [_pretraining_pair(corpus, rng, settings) for _ in range(settings.batch_size)]
        loss = model(**_collate(pairs)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(round(loss.item(), 4))
        bar.set_postfix(loss=losses[-1])
    model.eval()
    return losses


def _lr_factor(step: int, settings: PretrainConfig) -> float:
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    return max(0.0, (settings.steps - step) / max(1, settings.steps - settings.warmup_steps))


def _pretraining_pair(corpus: _Corpus, rng: random.Random, settings: PretrainConfig) -> tuple[list[int], list[int]]:
    if corpus.options and rng.random() < settings.copy_fraction:
        return _option_copy_pair(corpus, rng, settings.answer_in_passage)
    return _span_corruption_pair(corpus, corpus.window(rng, settings.max_source_tokens), rng, settings)


def _option_copy_pair(corpus: _Corpus, rng: random.Random, answer_in_passage: bool = False) -> tuple[list[int], list[int]]:
    """A prompt laid out like the tasks' (instruction, options, passage, answer cue) answered by a listed option."""
    count = len(corpus.options)
    options = rng.sample(corpus.options, rng.randint(min(2, count), min(MAX_LISTED_OPTIONS, count)))
    instruction = corpus.text(rng, rng.randint(6, 20))
    answer = rng.choice(options)
    words = corpus.text(rng, corpus.max_source_tokens // 2).split()
    if answer_in_passage:
        words.insert(rng.randrange(len(words) + 1), answer)
    source = _prompt(f"{instruction}\n", options, " ".join(words))
    encoded = corpus.tokenizer(source, text_target=answer)
    return encoded["input_ids"], encoded["labels"]


def _prompt(instruction: str, options: list[str], passage: str) -> str:
    return prompt_prefix(TaskSpec("pretraining", instruction, tuple(options))) + passage + ANSWER_SUFFIX


def _span_corruption_pair(
    corpus: _Corpus, ids: list[int], rng: random.Random, settings: PretrainConfig
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
    eos_id = corpus.tokenizer.eos_token_id
    return source + [eos_id], target + [eos_id]


def _noise_mask(length: int, rng: random.Random, settings: PretrainConfig) -> list[bool]:
    """T5's random_spans_noise_mask: alternating kept and noise spans of random lengths, noise last."""
    if length < 2:
        return [False] * length
    num_noise = min(max(1, round(length * settings.noise_density)), length - 1)
    num_spans = max(1, min(round(num_noise / settings.mean_span_length), num_noise, length - num_noise))
    mask: list[bool] = []
    kept, noise = (
        _random_segmentation(length - num_noise, num_spans, rng),
        _random_segmentation(num_noise, num_spans, rng),
    )
    for kept_length, noise_length in zip(kept, noise, strict=True):
        mask += [False] * kept_length + [True] * noise_length
    return mask


def _random_segmentation(total: int, parts: int, rng: random.Random) -> list[int]:
    """`total` items cut into `parts` non-empty runs at random."""
    bounds = [0, *sorted(rng.sample(range(1, total), parts - 1)), total]
    return [end - start for start, end in zip(bounds, bounds[1:], strict=False)]


def _collate(pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    source_length = max(len(source) for source, _ in pairs)
    target_length = max(len(target) for _, target in pairs)
    input_ids = torch.tensor([source + [0] * (source_length - len(source)) for source, _ in pairs])
    labels = torch.tensor([target + [IGNORE_INDEX] * (target_length - len(target)) for _, target in pairs])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}
