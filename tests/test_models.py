"""The model loader: a local `save_pretrained` directory, a clear error otherwise, and `tiny` through its cache."""

from __future__ import annotations

import pytest
import torch

from jumplora import models, tiny
from jumplora.errors import JumpLoRAError
from jumplora.models import load_model, looks_like_a_path
from tests.tiny.conftest import INSTRUCTION, PASSAGES, assert_same_weights, load_tiny


def test_loads_a_saved_model_directory(tmp_path):
    model, tokenizer = load_tiny(tmp_path / "built")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_model(str(tmp_path), cache_dir=tmp_path / "cache", dropout_rate=0.0)
    assert_same_weights(model, loaded)
    assert loaded.config.dropout_rate == 0.0
    prompt = loaded_tokenizer(f"{INSTRUCTION}{PASSAGES[0]}", return_tensors="pt")
    assert torch.equal(loaded.generate(**prompt, max_new_tokens=4), model.generate(**prompt, max_new_tokens=4))


def test_a_causal_checkpoint_loads_as_a_causal_lm_by_its_config_whatever_its_name(tmp_path):
    """The family comes from `is_encoder_decoder`; a tokenizer without a pad token pads with EOS; the dropout
    override reaches a Llama's `attention_dropout`."""
    from transformers import LlamaForCausalLM

    from jumplora.families import CAUSAL, family_of
    from tests.conftest import make_llama

    _, tokenizer = load_tiny(tmp_path / "built")
    tokenizer.pad_token = None
    model = make_llama()
    directory = tmp_path / "t5-large-lookalike"  # the name says nothing
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    loaded, loaded_tokenizer = load_model(str(directory), cache_dir=tmp_path, dropout_rate=0.25)
    assert isinstance(loaded, LlamaForCausalLM) and family_of(loaded) == CAUSAL
    assert loaded.config.attention_dropout == 0.25
    assert loaded_tokenizer.pad_token_id == loaded_tokenizer.eos_token_id
    assert_same_weights(model, loaded)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(JumpLoRAError, match="model directory .*no-such-model does not exist: .*'tiny'"):
        load_model(str(tmp_path / "no-such-model"), cache_dir=tmp_path)
    with pytest.raises(JumpLoRAError, match="cannot load model .*pass 'tiny'"):  # there, but no model in it
        load_model(str(tmp_path), cache_dir=tmp_path)


@pytest.mark.parametrize(("name", "path"), [("/no/such/dir", True), ("./models/t5", True), ("~/t5", True),
                                            ("runs/models/t5", True), ("google-t5/t5-large", False),
                                            ("t5-small", False)])
def test_what_looks_like_a_path(name, path):
    assert looks_like_a_path(name) is path


def test_a_hub_model_loaded_without_progress_bars_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    """Without Hugging Face's bars (`--quiet`) a hub model's first load is a download of minutes: one line says so;
    with them, the bars do. A local folder of that name is no download. (The load itself is stubbed.)"""
    monkeypatch.setattr(models, "_load_pretrained", lambda name, dropout: (name, None))
    monkeypatch.chdir(tmp_path)
    assert load_model("google-t5/t5-large", cache_dir=tmp_path, progress=False)[0] == "google-t5/t5-large"
    assert capsys.readouterr().err == ("loading google-t5/t5-large from the Hugging Face Hub (its first use downloads "
                                       "it: minutes for a large model)\n")
    load_model("google-t5/t5-large", cache_dir=tmp_path)
    (tmp_path / "t5-small").mkdir()
    load_model("t5-small", cache_dir=tmp_path, progress=False)
    assert capsys.readouterr().err == ""


def test_tiny_loads_the_preset_of_the_data_source(tmp_path, monkeypatch):
    model, _ = load_tiny(tmp_path)
    built = next(tmp_path.glob("tiny-*"))
    calls = []
    monkeypatch.setattr(tiny, "model_dir", lambda *args, **kwargs: calls.append((args, kwargs)) or built)
    loaded, _ = load_model("tiny", data_dir="some/folder", cache_dir=tmp_path, progress=False)
    assert calls == [(("some/folder", tmp_path, False), {"causal": False})]
    assert_same_weights(model, loaded)
    load_model("tiny-causal", data_dir="some/folder", cache_dir=tmp_path, progress=False)
    assert calls[-1] == (("some/folder", tmp_path, False), {"causal": True})
