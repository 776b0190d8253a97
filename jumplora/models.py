"""Base models: a hub name or a local `save_pretrained` directory of a seq2seq (T5) or decoder-only causal LM, or one
of the offline tiny presets (`jumplora.tiny`). The family is read from the checkpoint's config, never its name."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from jumplora import tiny
from jumplora.errors import JumpLoRAError
from jumplora.families import SEQ2SEQ, family_of


def load_model(name_or_path: str, *, data_dir: str | None = None, cache_dir: Path, progress: bool = True,
               dropout_rate: float | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a tiny preset (built once from the data source `data_dir`, None for the synthetic benchmark, then cached
    under `cache_dir`), a local `save_pretrained` directory or a hub name. `dropout_rate` overrides every dropout
    probability of the checkpoint's config (None keeps them). Without `progress` a hub model's load is one line on
    stderr instead of Hugging Face's bars (its first use downloads it: minutes for a large model)."""
    if name_or_path in tiny.PRESETS:
        with progress_bars(progress):  # the preset's build saves its model ("Writing model shards")
            name_or_path = str(tiny.named_model_dir(name_or_path, data_dir, Path(cache_dir), progress))
    elif looks_like_a_path(name_or_path):
        name_or_path = os.path.expanduser(name_or_path)
        if not Path(name_or_path).exists():
            raise JumpLoRAError(
                f"model directory {name_or_path} does not exist: pass a directory written by save_pretrained, 'tiny'"
                " or 'tiny-causal' for an offline preset, or a hub name such as google-t5/t5-large"
            )
    elif not progress and not Path(name_or_path).is_dir():
        print(f"loading {name_or_path} from the Hugging Face Hub (its first use downloads it: minutes for a large "
              "model)", file=sys.stderr, flush=True)
    with progress_bars(progress):
        return _load_pretrained(name_or_path, dropout_rate)


@contextlib.contextmanager
def progress_bars(shown: bool) -> Iterator[None]:
    """Hugging Face's own progress bars ("Loading weights") only with `shown`: a quiet run's stderr holds only what
    it says itself (one line for an error)."""
    before = hf_logging.is_progress_bar_enabled()
    if not shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if before and not shown:
            hf_logging.enable_progress_bar()


def looks_like_a_path(name: str) -> bool:
    """Absolute, starting with `.` or `~`, or with more than one `/` (a hub name is `owner/name` or `name`)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or \
        (os.sep != "/" and os.sep in name)


def _load_pretrained(name_or_path: str, dropout_rate: float | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        config = AutoConfig.from_pretrained(name_or_path)
        if dropout_rate is not None:  # every dropout probability: `dropout_rate` (T5), `attention_dropout` (Llama), …
            dropouts = [name for name, value in vars(config).items()
                        if isinstance(value, float) and name.endswith(("dropout", "dropout_rate", "_pdrop"))]
            for name in dropouts:
                setattr(config, name, dropout_rate)
        auto = AutoModelForSeq2SeqLM if family_of(config) == SEQ2SEQ else AutoModelForCausalLM
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = auto.from_pretrained(name_or_path, config=config, dtype=torch.float32)
    except (OSError, ValueError, SafetensorError) as error:  # missing, not a model, or damaged (a cut-off file)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise JumpLoRAError(
            f"cannot load model {name_or_path!r} ({reason}): pass 'tiny' or 'tiny-causal' for an offline preset, a"
            " directory written by save_pretrained, or a hub name such as google-t5/t5-large or"
            " meta-llama/Llama-3.2-1B on a machine with network access"
        ) from error
    if tokenizer.pad_token_id is None:  # Llama-style tokenizers have none; padding is masked, so </s> serves
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
