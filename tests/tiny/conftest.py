"""Fixtures for the tiny preset tests: a miniature preset (small shape, three pre-training steps) built from a few
prompt-like texts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jumplora.models import load_model
from jumplora.tiny import PretrainConfig, TinyModelConfig, preset_dir

OPTIONS = ["Good", "Bad", "very negative", "Science & Mathematics", "Society & Culture", "Written Work", "A", "B"]
INSTRUCTION = "What is the sentiment of the following paragraph? Choose one from the option.\n"
PASSAGES = [
    "The film was a wonderful surprise, with superb acting and a delightful score.",
    "An awful, boring plot; the dialogue is dull and the ending is terrible.",
    "Researchers measured the orbit of the new comet with a larger telescope.",
    "The village council voted to rebuild the old bridge before the winter floods.",
] * 3
TEXTS = [INSTRUCTION, *OPTIONS, *PASSAGES]
SMALL_MODEL = TinyModelConfig(vocab_size=300, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_sentinels=8)
FEW_STEPS = PretrainConfig(steps=3, batch_size=4, warmup_steps=1, max_source_tokens=32)


def load_tiny(cache_dir: Path, texts=TEXTS, seed: int = 0, pretrain_config: PretrainConfig = FEW_STEPS,
              causal: bool = False):
    """The miniature preset of `texts` (the T5, or the causal one; built under `cache_dir` when missing) and its
    tokenizer."""
    path = preset_dir(texts, cache_dir, seed=seed, progress=False, causal=causal, tiny_config=SMALL_MODEL,
                      pretrain_config=pretrain_config)
    return load_model(str(path), cache_dir=cache_dir)


def assert_same_weights(first, second) -> None:
    first_state, second_state = first.state_dict(), second.state_dict()
    assert first_state.keys() == second_state.keys()
    for name, tensor in first_state.items():
        assert torch.equal(tensor, second_state[name]), name


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(cache_dir, model, tokenizer) of the miniature preset of TEXTS, built once per test module."""
    cache_dir = tmp_path_factory.mktemp("cache")
    model, tokenizer = load_tiny(cache_dir)
    return cache_dir, model, tokenizer
