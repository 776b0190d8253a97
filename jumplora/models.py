"""Base models: a hub T5, a local `save_pretrained` directory, or the `tiny` offline preset (`jumplora.tiny`)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from jumplora import tiny
from jumplora.errors import JumpLoRAError


def load_model(
    name_or_path: str,
    *,
    data_dir: str | None = None,
    cache_dir: Path,
    progress: bool = True,
    dropout_rate: float | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `tiny` (built once from the data source `data_dir`, None for the synthetic benchmark, then cached under
    `cache_dir`), a local `save_pretrained` directory or a hub name.

    `dropout_rate` overrides the checkpoint's dropout (None keeps it: 0.1 for T5; the tiny preset's is
    its pre-training's, `PretrainConfig.dropout_rate`).
    """
    overrides = {} if dropout_rate is None else {"dropout_rate": dropout_rate}
    if name_or_path == tiny.TINY:
        name_or_path = str(tiny.model_dir(data_dir, Path(cache_dir), progress))
    elif looks_like_a_path(name_or_path):
        name_or_path = os.path.expanduser(name_or_path)
        if not Path(name_or_path).exists():
            raise JumpLoRAError(
                f"model directory {name_or_path} does not exist: pass a directory written by save_pretrained, 'tiny'"
                " for the offline preset, or a hub name such as google-t5/t5-large"
            )
    return _load_pretrained(name_or_path, overrides)


def looks_like_a_path(name: str) -> bool:
    """Absolute, starting with `.` or `~`, or with more than one `/` (a hub name is `owner/name` or `name`)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or \
        (os.sep != "/" and os.sep in name)


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
