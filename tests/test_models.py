"""The model loader and the tiny offline preset, built with a miniature shape and a few pre-training steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jumplora import models
from jumplora.errors import JumpLoRAError
from jumplora.models import ADAPTER_TARGETS, PretrainConfig, TinyModelConfig, load_model

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


def load_tiny(cache_dir: Path, texts=TEXTS, seed: int = 0):
    return load_model(
        "tiny",
        texts=texts,
        cache_dir=cache_dir,
        seed=seed,
        progress=False,
        tiny_config=SMALL_MODEL,
        pretrain_config=FEW_STEPS,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("cache")
    model, tokenizer = load_tiny(cache_dir)
    return cache_dir, model, tokenizer


def assert_same_weights(first, second) -> None:
    first_state, second_state = first.state_dict(), second.state_dict()
    assert first_state.keys() == second_state.keys()
    for name, tensor in first_state.items():
        assert torch.equal(tensor, second_state[name]), name


def test_options_and_prompt_scaffold_never_tokenise_to_unk(tiny):
    _, _, tokenizer = tiny
    for text in [*OPTIONS, f"{INSTRUCTION}{models.OPTION_PREFIX}{', '.join(OPTIONS)}\n{PASSAGES[0]}"]:
        ids = tokenizer(text).input_ids
        assert tokenizer.unk_token_id not in ids, text
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids, skip_special_tokens=True) == " ".join(text.split())


def test_tokenizer_is_case_sensitive_with_t5_special_ids(tiny):
    _, model, tokenizer = tiny
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    assert tokenizer("Good").input_ids != tokenizer("good").input_ids
    assert model.config.decoder_start_token_id == 0
    assert model.config.vocab_size == len(tokenizer)
    sentinel = tokenizer.convert_tokens_to_ids("<extra_id_0>")
    assert tokenizer.decode([sentinel, *tokenizer("Good").input_ids], skip_special_tokens=True) == "Good"


def test_adapted_linears_are_much_larger_than_a_rank_8_adapter(tiny):
    _, model, _ = tiny
    adapted = [module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] in ADAPTER_TARGETS]
    assert len(adapted) == 2 * 3 * SMALL_MODEL.num_layers  # encoder self, decoder self and cross attention
    for linear in adapted:
        assert linear.in_features * linear.out_features > 8 * (linear.in_features + linear.out_features)


def test_cache_hit_loads_identical_weights_without_rebuilding(tiny, monkeypatch):
    cache_dir, model, tokenizer = tiny
    monkeypatch.setattr(models, "_build_tiny", pytest.fail)
    again, again_tokenizer = load_tiny(cache_dir, texts=list(reversed(TEXTS)) + TEXTS[:3])
    assert_same_weights(model, again)
    assert again_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert [path.name for path in cache_dir.iterdir()] == [next(cache_dir.glob("tiny-*")).name]


def test_build_is_deterministic_and_leaves_global_rng_alone(tiny, tmp_path):
    _, model, tokenizer = tiny
    rng_state = torch.get_rng_state()
    rebuilt, rebuilt_tokenizer = load_tiny(tmp_path)
    assert torch.equal(torch.get_rng_state(), rng_state)
    assert_same_weights(model, rebuilt)
    assert rebuilt_tokenizer.get_vocab() == tokenizer.get_vocab()


def test_other_seed_or_texts_give_another_model(tiny, tmp_path):
    cache_dir, model, _ = tiny
    other_seed, _ = load_tiny(cache_dir, seed=1)
    load_tiny(cache_dir, texts=[*TEXTS, "One more passage about trains."])
    assert not torch.equal(model.shared.weight, other_seed.shared.weight)
    assert len(list(cache_dir.glob("tiny-*"))) == 3


def test_failed_build_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(models, "_pretrain", crash)
    with pytest.raises(RuntimeError, match="killed mid-build"):
        load_tiny(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_loads_a_saved_model_directory(tiny, tmp_path):
    _, model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_model(str(tmp_path), texts=None, cache_dir=tmp_path / "cache", dropout_rate=0.0)
    assert_same_weights(model, loaded)
    assert loaded.config.dropout_rate == 0.0
    prompt = loaded_tokenizer(f"{INSTRUCTION}{PASSAGES[0]}", return_tensors="pt")
    assert torch.equal(loaded.generate(**prompt, max_new_tokens=4), model.generate(**prompt, max_new_tokens=4))


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(JumpLoRAError, match="cannot load model .*pass 'tiny'"):
        load_model(str(tmp_path / "no-such-model"), texts=None, cache_dir=tmp_path)


def test_tiny_needs_texts(tmp_path):
    with pytest.raises(JumpLoRAError, match="texts"):
        load_model("tiny", texts=None, cache_dir=tmp_path)
