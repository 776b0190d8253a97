"""The offline base models: `tiny`, a small T5, and `tiny-causal`, a small Llama-style decoder, each built from the
data source's own texts and cached under `cache_dir/tiny-<fingerprint>/` (the fingerprint covers the texts, so each
data source has a preset of its own): a Unigram tokenizer trained on the texts (`tokenizer`) and a short seeded
pre-training (`pretrain`, on the mixture of `corpus`; docs/DECISIONS.md, "Tiny preset pre-training"). One build at a
time per cache (`building_in`), said in one line on stderr whatever `progress` says (`_announce`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from jumplora.data import load_benchmark
from jumplora.data.encode import TokenizerFile
from jumplora.data.location import TINY_PRESETS
from jumplora.errors import JumpLoRAError, writing
from jumplora.tiny.corpus import supervised_mixture, tokenizer_corpus
from jumplora.tiny.tokenizer import build_tokenizer

__all__ = ["BASE_MODEL_SEED", "PRESETS", "TINY", "TINY_CAUSAL", "PretrainConfig", "TinyModelConfig", "building_in",
           "model_dir", "preset_dir", "preset_tokenizer"]

TINY, TINY_CAUSAL = PRESETS = TINY_PRESETS
BASE_MODEL_SEED = 0  # the tiny preset's base is the same for every run seed, as a pretrained checkpoint would be
FORMAT_VERSION = 3  # 3: the saved config keeps the pre-training's dropout (was 0.1)
# The build's CPU threads, whatever the caller uses: the weights depend on the count (docs/DECISIONS.md, "Tiny preset
# pre-training"); pinned, one fingerprint is one model in a test process, a bench, or a Ray worker holding one CPU.
BUILD_THREADS = 2
BUILD_RECORD = "build.json"  # in a preset's folder: what it was built for and how long it took (`_announce`)


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of a tiny preset: the adapted query/value are d_model x (heads*d_kv), far above rank 8 x (d_in + d_out).
    `num_layers` is the depth of the T5's encoder and of its decoder, and of the causal model's one stack."""

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
    dropout_rate: float = 0.0  # also the saved checkpoint's (docs/DECISIONS.md, "Tiny preset dropout")
    max_source_tokens: int = 96
    noise_density: float = 0.15
    mean_span_length: float = 3.0
    copy_fraction: float = 0.5
    real_option_share: float = 0.25
    cooccurrence_window: int = 50
    supervised_fraction: float = 0.75  # share of (prompt, answer) pairs in a batch when the data supplies them
    max_supervised_source_tokens: int = 192


def model_dir(data_dir: str | None, cache_dir: Path, progress: bool = True, *, causal: bool = False,
              pretrain_config: PretrainConfig = PretrainConfig()) -> Path:
    """The preset directory (`tiny`, or `tiny-causal` with `causal`) for the data source `data_dir` (None: the
    synthetic benchmark), built when missing from the whole data source (uncapped), so that one base serves every
    order, seed and cap of that source."""
    texts, supervised = _source_mixture(data_dir)
    return preset_dir(texts, cache_dir, supervised=supervised, progress=progress, causal=causal,
                      pretrain_config=pretrain_config,
                      source="the synthetic benchmark" if data_dir is None else f"the data in {data_dir}")


def named_model_dir(name: str, data_dir: str | None, cache_dir: Path, progress: bool = True) -> Path:
    """The directory of the preset called `name` (one of PRESETS)."""
    return model_dir(data_dir, cache_dir, progress, causal=name == TINY_CAUSAL)


def preset_tokenizer(name: str, data_dir: str | None, cache_dir: Path) -> TokenizerFile | PreTrainedTokenizerFast:
    """The tokenizer of the preset called `name` for the data source `data_dir`, without building its model: its
    `tokenizer.json` when the preset is cached (`TokenizerFile`: no torch), else trained alone, as the build trains it
    first (from the same texts, with the same settings: the same pieces and ids). What counts tokens (`--dry-run`)
    needs no pre-trained model."""
    texts, supervised = _source_mixture(data_dir)
    target = _cached(cache_dir, texts, BASE_MODEL_SEED, TinyModelConfig(), PretrainConfig(), supervised,
                     name == TINY_CAUSAL)
    return TokenizerFile(target) if target.is_dir() else build_tokenizer(texts, TinyModelConfig())


def _source_mixture(data_dir: str | None) -> tuple[list[str], list[tuple[str, str]]]:
    """The texts (sorted, each once) and (prompt, answer) pairs a preset of the data source `data_dir` learns."""
    source = load_benchmark(data_dir, seed=BASE_MODEL_SEED)
    return sorted(set(tokenizer_corpus(source))), supervised_mixture(source, BASE_MODEL_SEED)


def preset_dir(texts: Sequence[str], cache_dir: Path, *, supervised: Sequence[tuple[str, str]] = (),
               seed: int = BASE_MODEL_SEED, progress: bool = True, causal: bool = False,
               tiny_config: TinyModelConfig = TinyModelConfig(), pretrain_config: PretrainConfig = PretrainConfig(),
               source: str = "the given texts") -> Path:
    """The cached preset directory for `texts` and the `supervised` (prompt, answer) pairs, built first (in a
    staging directory moved into place) when missing; `source` names where the texts come from, for the line that
    announces a build."""
    unique_texts, supervised = sorted(set(texts)), list(supervised)
    target = _cached(cache_dir, unique_texts, seed, tiny_config, pretrain_config, supervised, causal)
    if target.is_dir():
        return target
    name = TINY_CAUSAL if causal else TINY
    with writing(cache_dir):  # a full disk or a read-only cache: one line naming it; the staging goes away
        cache_dir.mkdir(parents=True, exist_ok=True)
        with building_in(cache_dir):
            if target.is_dir():  # built meanwhile by the process that held the cache
                return target
            with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{target.name}.") as staging:
                built = Path(staging) / target.name
                _announce(target, name, source)
                started = time.monotonic()
                _build(built, unique_texts, seed, progress, causal, tiny_config, pretrain_config, supervised)
                record = {"preset": name, "source": source, "seconds": round(time.monotonic() - started, 1),
                          "finished": time.time()}
                (built / BUILD_RECORD).write_text(json.dumps(record))
                try:
                    os.replace(built, target)
                except OSError:  # a concurrent build that got there first wins (the staging goes away)
                    if not target.is_dir():
                        raise
    return target


@contextlib.contextmanager
def building_in(cache_dir: Path) -> Iterator[None]:
    """Hold `cache_dir` for one build at a time (docs/DECISIONS.md, "One preset build at a time per cache"): an
    advisory `flock` on the folder itself, released when the process ends however it ends; a wait is said on stderr
    whatever the caller's progress setting."""
    folder = os.open(cache_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process building a tiny preset in {cache_dir}", file=sys.stderr, flush=True)
            fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # releases the lock


def _announce(target: Path, name: str, source: str) -> None:
    """One line on stderr before a build, however quiet the run (a build takes minutes on a CPU): the preset, its
    data and how long the cache's newest readable build record (`BUILD_RECORD`) says its build took."""
    line = (f"building the {name} preset {target.name} for {source} in {target.parent} (a preset is built once per "
            f"data source, from its texts)")
    records = []
    for path in target.parent.glob(f"tiny-*/{BUILD_RECORD}"):
        try:  # a record that does not read is passed over: it only tells a user what to expect
            record = json.loads(path.read_text())
            records.append((float(record["finished"]), float(record["seconds"]), record["preset"], record["source"]))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    if records:
        _, seconds, preset, last_source = max(records, key=lambda found: found[0])
        line += f"; the last build here took {_duration(seconds)} ({preset}, {last_source})"
    print(line, file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    """`seconds` as a reader takes in a build's time: "8 s", "5 min 12 s", "1 h 3 min"."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _cached(cache_dir: Path, unique_texts: list[str], seed: int, tiny_config: TinyModelConfig,
            pretrain_config: PretrainConfig, supervised: list[tuple[str, str]], causal: bool) -> Path:
    """Where the preset of these settings is cached under `cache_dir`: `tiny-<fingerprint of them all>`."""
    model = asdict(tiny_config)
    if causal:  # (the T5's fingerprint stays what it was before the causal preset existed)
        model["architecture"] = "llama"
    settings = {"format": FORMAT_VERSION, "seed": seed, "model": model, "pretrain": asdict(pretrain_config)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for item in [*unique_texts, *supervised]:
        digest.update(json.dumps(item).encode())
    return cache_dir / f"tiny-{digest.hexdigest()[:16]}"


def _build(out_dir: Path, texts: list[str], seed: int, progress: bool, causal: bool, config: TinyModelConfig,
           pretrain_config: PretrainConfig, supervised: list[tuple[str, str]]) -> None:
    import torch  # model code only where a preset is built
    from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

    from jumplora.tiny import pretrain

    if not texts:
        raise JumpLoRAError("the 'tiny' model preset needs at least one text to build its tokenizer from")
    tokenizer = build_tokenizer(texts, config)
    dropout = pretrain_config.dropout_rate
    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            # causal: Llama-style (RMSNorm, RoPE, SwiGLU, `q_proj`/`v_proj`), no BOS (the tokenizer adds none), its
            # own output layer (tied to the PPMI-initialised embeddings, the loss started at 29.9: DECISIONS)
            if causal:
                model = LlamaForCausalLM(LlamaConfig(
                    vocab_size=len(tokenizer), hidden_size=config.d_model, intermediate_size=config.d_ff,
                    num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
                    num_key_value_heads=config.num_heads, head_dim=config.d_kv, max_position_embeddings=1024,
                    attention_dropout=dropout, tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
                    bos_token_id=None))
            else:
                model = T5ForConditionalGeneration(T5Config(
                    vocab_size=len(tokenizer), d_model=config.d_model, d_kv=config.d_kv, num_heads=config.num_heads,
                    d_ff=config.d_ff, num_layers=config.num_layers, num_decoder_layers=config.num_layers,
                    dropout_rate=dropout, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
            losses = pretrain.train(model, tokenizer, texts, supervised, seed, pretrain_config, progress)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "pretraining.json").write_text(json.dumps({"losses": losses}))
