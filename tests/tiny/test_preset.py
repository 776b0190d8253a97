"""The tiny preset's cache: built once per data and settings, deterministic, never left half-built."""

import errno
import shutil
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from jumplora import cli, cli_run
from jumplora import tiny as preset
from jumplora.data import load_benchmark
from jumplora.errors import JumpLoRAError, WriteError
from jumplora.tiny import BASE_MODEL_SEED, model_dir, preset_dir, pretrain
from jumplora.tiny.corpus import supervised_mixture, tokenizer_corpus
from tests.tiny.conftest import FEW_STEPS, SMALL_MODEL, TEXTS, assert_same_weights, load_tiny


def test_adapted_linears_are_much_larger_than_a_rank_8_adapter(tiny):
    _, model, _ = tiny
    adapted = [module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] in ("q", "v")]
    assert len(adapted) == 2 * 3 * SMALL_MODEL.num_layers  # encoder self, decoder self and cross attention
    for linear in adapted:
        assert linear.in_features * linear.out_features > 8 * (linear.in_features + linear.out_features)


def test_cache_hit_loads_identical_weights_without_rebuilding(tiny, monkeypatch):
    cache_dir, model, tokenizer = tiny
    monkeypatch.setattr(preset, "_build", pytest.fail)
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


@pytest.mark.parametrize("threads", [1, 3])
def test_the_callers_thread_count_changes_neither_the_model_nor_its_own(tiny, tmp_path, threads):
    _, model, _ = tiny
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rebuilt, _ = load_tiny(tmp_path)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert_same_weights(model, rebuilt)


def test_the_checkpoint_keeps_the_dropout_it_was_pre_trained_with(tiny, tmp_path):
    """Adapters then train with the base's own dropout (t5-large's config keeps its 0.1 the same way)."""
    _, model, _ = tiny
    assert model.config.dropout_rate == 0.0  # FEW_STEPS keeps PretrainConfig's default
    other, _ = load_tiny(tmp_path, pretrain_config=replace(FEW_STEPS, dropout_rate=0.2))
    assert other.config.dropout_rate == 0.2


def test_other_seed_or_texts_give_another_model(tiny, tmp_path):
    cache_dir, model, _ = tiny
    other_seed, _ = load_tiny(cache_dir, seed=1)
    load_tiny(cache_dir, texts=[*TEXTS, "One more passage about trains."])
    assert not torch.equal(model.shared.weight, other_seed.shared.weight)
    assert len(list(cache_dir.glob("tiny-*"))) == 3


def test_failed_build_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(pretrain, "train", crash)
    with pytest.raises(RuntimeError, match="killed mid-build"):
        load_tiny(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_building_is_one_error_naming_the_cache_and_leaves_nothing(tmp_path, monkeypatch):
    def full(out_dir, *args):
        out_dir.mkdir()
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(preset, "_build", full)
    with pytest.raises(WriteError, match=f"^cannot write {tmp_path}: No space left on device: free some space"):
        preset_dir(TEXTS, tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_preset_another_process_is_building_is_waited_for_and_not_built_again(tmp_path, monkeypatch, capsys):
    """The cache held as a build elsewhere holds it (`building_in`, in this thread): the caller waits, says so, and
    returns the preset that build published, without building it."""
    builds = []
    monkeypatch.setattr(preset, "_build", lambda out_dir, *args: (builds.append(out_dir), out_dir.mkdir()))
    name = preset_dir(TEXTS, tmp_path / "elsewhere", progress=False).name  # the preset's name, in any cache
    capsys.readouterr()  # the line of that build
    (tmp_path / "cache").mkdir()
    target = tmp_path / "cache" / name
    found = []
    with preset.building_in(tmp_path / "cache"):
        waiting = threading.Thread(target=lambda: found.append(preset_dir(TEXTS, tmp_path / "cache")))
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and found == []  # blocked on the held cache
        target.mkdir()  # what the other build publishes before it lets go
    waiting.join(timeout=30)
    assert found == [target] and len(builds) == 1  # only the first call, into `elsewhere`, built
    assert capsys.readouterr().err == f"waiting for another process building a tiny preset in {tmp_path / 'cache'}\n"
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == [target.name]  # no lock file left


def test_tiny_needs_texts(tmp_path):
    with pytest.raises(JumpLoRAError, match="at least one text"):
        preset_dir([], tmp_path, progress=False)


def test_model_dir_is_built_from_the_whole_data_source_with_its_mixture(tmp_path, monkeypatch):
    monkeypatch.setattr(preset, "_build", lambda out_dir, *args: out_dir.mkdir())
    source = load_benchmark(None, seed=BASE_MODEL_SEED)
    expected = preset_dir(tokenizer_corpus(source), tmp_path, supervised=supervised_mixture(source, BASE_MODEL_SEED))
    assert model_dir(None, tmp_path, progress=False) == expected
    assert [path.name for path in tmp_path.iterdir()] == [expected.name]


def test_the_causal_preset_is_a_llama_style_decoder_with_the_same_shape_and_tokenizer(tiny, tmp_path):
    from transformers import LlamaForCausalLM

    _, _, tokenizer = tiny
    causal, causal_tokenizer = load_tiny(tmp_path, causal=True)
    assert isinstance(causal, LlamaForCausalLM) and not causal.config.is_encoder_decoder
    shape = (causal.config.hidden_size, causal.config.num_hidden_layers)
    assert shape == (SMALL_MODEL.d_model, SMALL_MODEL.num_layers)
    assert not causal.config.tie_word_embeddings  # its own output layer (DECISIONS: the tied one started at loss 30)
    assert causal_tokenizer.get_vocab() == tokenizer.get_vocab()
    adapted = [name for name, _ in causal.named_modules() if name.rsplit(".", 1)[-1] in ("q_proj", "v_proj")]
    assert len(adapted) == 2 * SMALL_MODEL.num_layers
    rebuilt, _ = load_tiny(tmp_path / "again", causal=True)
    assert_same_weights(causal, rebuilt)
    load_tiny(tmp_path)  # the T5 of the same texts and settings: a preset of its own
    assert len(list(tmp_path.glob("tiny-*"))) == 2


def test_a_quiet_run_that_builds_a_preset_says_which_for_what_data_and_how_long_the_last_build_took(
        tiny, tmp_path, monkeypatch, capsys):
    """`jumplora run --quiet` shows no progress, yet a preset build takes minutes (a real-data run built one silently
    for 41): one line on stderr names the preset, its data and the cache's last build. A quiet run on a fresh cache
    builds the tiny T5's preset (the run stops once prepared), then the tiny-causal preset is built there (as a run
    of it would: `model_dir`, without progress); the build is stubbed (a copy of the module's miniature) and timed by
    a fake clock: 312.4 s, then 75 s."""
    miniature = preset_dir(TEXTS, tiny[0], progress=False, tiny_config=SMALL_MODEL, pretrain_config=FEW_STEPS)
    monkeypatch.setattr(preset, "_build", lambda out_dir, *args: shutil.copytree(miniature, out_dir))
    ticks = iter([1000.0, 1312.4, 2000.0, 2075.0])  # each build reads the clock as it starts and as it ends
    monkeypatch.setattr(preset, "time", SimpleNamespace(monotonic=lambda: next(ticks), time=time.time))
    monkeypatch.setattr(cli_run, "train_into", lambda out, ws, args: 0)
    cache = tmp_path / "cache"
    assert cli.main(["run", "--order", "1", "--max-tasks", "1", "--max-train-per-task", "96", "--max-eval-per-task",
                     "16", "--quiet", "--no-tracking", "--cache-dir", str(cache), "--out", str(tmp_path / "run")]) == 0
    [t5] = cache.glob("tiny-*")
    assert capsys.readouterr().err == (f"building the tiny preset {t5.name} for the synthetic benchmark in {cache} (a "
                                       "preset is built once per data source, from its texts)\n")
    causal = model_dir(None, cache, progress=False, causal=True)
    assert capsys.readouterr().err == (
        f"building the tiny-causal preset {causal.name} for the synthetic benchmark in {cache} (a preset is built "
        "once per data source, from its texts); the last build here took 5 min 12 s (tiny, the synthetic benchmark)\n")
