import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

from jumplora import tiny
from jumplora.adapters import AdapterKind
from jumplora.config import RunConfig
from jumplora.data.location import DATA_DIR_ENV


def adapter_settings(kind: AdapterKind, targets: tuple[str, ...] = ("q", "v"), **fields):
    """An adapter kind's settings as a run builds them: from a `RunConfig` with `fields` changed."""
    return kind.configure(RunConfig(**fields), targets)


def make_t5(num_layers: int = 2, num_decoder_layers: int = 2, d_model: int = 64, seed: int = 0):
    """A random T5 small enough for unit tests (vocab 50, d_model 64): adapted q/v are 64×64 ≫ r·(64+64)."""
    torch.manual_seed(seed)
    config = T5Config(vocab_size=50, d_model=d_model, d_kv=16, num_heads=4, d_ff=128, num_layers=num_layers,
                      num_decoder_layers=num_decoder_layers, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0, dropout_rate=0.0)
    return T5ForConditionalGeneration(config).eval()


def make_llama(num_layers: int = 2, hidden: int = 64, seed: int = 0, attention_dropout: float = 0.0):
    """A random Llama-style decoder as small (vocab 50, hidden 64, 4 heads of 16): adapted q_proj/v_proj are 64×64;
    SDPA attention, its dropout `attention_dropout` in training."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=50, hidden_size=hidden, intermediate_size=128, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=16, pad_token_id=0, eos_token_id=1,
                         bos_token_id=None, max_position_embeddings=128, attention_dropout=attention_dropout)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def t5():
    return make_t5()


@pytest.fixture
def t5_batch():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(2, 50, (3, 7), generator=generator)
    labels = torch.randint(2, 50, (3, 3), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


# Building the tiny T5 preset takes ~5 min on 2 cores: a process of its own builds it from the session's start, while
# the modules that need no preset run first (their waits on PyPI, servers and subprocesses leave CPU to spare). A test
# that needs it while it is being built waits for that build (the cache is held by one build at a time:
# `tiny.building_in`); the first test that needs a preset may wait for it: its timeout gets BUILD_SECONDS more.
# The causal tests read `causal_preset` instead of the product's `tiny-causal` (whose 440 pre-training steps would
# cost the session another ~5 min of both cores): the same shape, tokenizer and data, pre-trained briefly.
BUILD_SECONDS = 1200
BUILD = ("import signal, sys; from pathlib import Path; from jumplora import tiny; "
         "signal.signal(signal.SIGTERM, lambda *_: sys.exit(1)); "  # stopped: the staging folder is removed
         "tiny.named_model_dir(tiny.TINY, None, Path(sys.argv[1]), progress=False)")


def _needs_presets(item) -> bool:
    return "tiny_cache" in getattr(item, "fixturenames", ())


# The fast tier (`make test-fast`: `-m "not slow"`) leaves out, by one rule, what makes the suite slow: a test that
# needs the tiny preset (built in ~5 min: `tiny_cache`, and with it `causal_preset`, the tracked runs and the MLflow
# server and browser tests built on them, and a local Ray), an S3 server, or lives in tests/ray_jobs (Ray clusters) or
# tests/docker (resolves the image's requirements).
SLOW_FIXTURES = {"tiny_cache", "local_ray", "logging_ray", "s3_bucket"}
SLOW_FOLDERS = {Path(__file__).parent / "ray_jobs", Path(__file__).parent / "docker"}


def pytest_itemcollected(item) -> None:
    """Mark `slow` a test of the rule above (before `-m` selects), and skip a test marked `gpu` where no CUDA device
    is."""
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or SLOW_FOLDERS & set(item.path.parents):
        item.add_marker(pytest.mark.slow)
    if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
        item.add_marker(pytest.mark.skip(reason="marked gpu: this machine has no CUDA device"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items) -> None:
    """Whole modules that need no tiny preset first (a module stays in one piece: its module fixtures are set up
    once), then the others, each in collection order."""
    with_presets = {item.path for item in items if _needs_presets(item)}
    items.sort(key=lambda item: item.path in with_presets)
    first = next((item for item in items if _needs_presets(item)), None)
    marker = first.get_closest_marker("timeout") if first is not None else None
    if marker is not None and marker.args:
        first.add_marker(pytest.mark.timeout(marker.args[0] + BUILD_SECONDS), append=False)


@pytest.fixture(scope="session", autouse=True)
def _preset_build(tmp_path_factory, request):
    """The session's preset cache (JUMPLORA_TEST_CACHE keeps it between sessions), and the process building the tiny
    T5 preset into it, started before the first test when a test of the session needs them; a session that ends before
    the build does stops it (a preset none of its tests asked for). Yields (cache, the build's process, its log); no
    process when no test needs a preset."""
    kept = os.environ.get("JUMPLORA_TEST_CACHE")
    cache = Path(kept) if kept else tmp_path_factory.mktemp("jumplora-cache")
    if not any(_needs_presets(item) for item in request.session.items):
        yield cache, None, None
        return
    log = tmp_path_factory.mktemp("preset-build") / "build.log"
    env = {key: value for key, value in os.environ.items() if key != DATA_DIR_ENV}  # the synthetic data's presets
    with open(log, "w") as out:
        build = subprocess.Popen([sys.executable, "-c", BUILD, str(cache)], env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
    yield cache, build, log
    if build.poll() is None:
        build.terminate()
        build.wait()
    elif build.returncode != 0:
        raise RuntimeError(f"building the tiny presets failed (exit code {build.returncode}):\n"
                           f"{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def tiny_cache(_preset_build) -> Path:
    """The session's preset cache, its tiny T5 preset built: the first test that asks waits here for the build, so
    that no test's own output holds the product's line about waiting for another process's build."""
    cache, build, log = _preset_build
    if build is not None and build.wait() != 0:
        pytest.fail(f"building the tiny presets failed (exit code {build.returncode}):\n{log.read_text()[-3000:]}")
    return cache


CAUSAL_PRETRAIN_STEPS = 40


@pytest.fixture(scope="session")
def causal_preset(tiny_cache) -> Path:
    """A causal preset for the tests of the Llama-style family: `tiny-causal`'s shape, tokenizer and pre-training
    data (the synthetic benchmark's), pre-trained for CAUSAL_PRETRAIN_STEPS steps instead of 440 (~20 s, not ~5 min,
    of both cores). Those tests check what the loop, checkpoints and outputs do on a decoder, not how well it answers;
    the build itself is tested on a miniature (tests/tiny). Pass it as the model's local path."""
    return tiny.model_dir(None, tiny_cache, progress=False, causal=True,
                          pretrain_config=replace(tiny.PretrainConfig(), steps=CAUSAL_PRETRAIN_STEPS))


@pytest.fixture(autouse=True, scope="session")
def _throwaway_tracking_store(tmp_path_factory):
    """Runs started by tests log to a throwaway MLflow store, never to the user's ./runs/mlflow.db."""
    patch = pytest.MonkeyPatch()
    if "MLFLOW_TRACKING_URI" not in os.environ:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}")
    yield
    patch.undo()


@pytest.fixture(autouse=True, scope="session")
def _no_data_of_this_machine(tmp_path_factory):
    """Runs started by tests find no data of the machine ($JUMPLORA_DATA_DIR, ~/.cache/jumplora/CL_Benchmark) and
    write no cache there (a command's default --cache-dir is the session's): a test that reads the real data names
    it."""
    from jumplora.data import location

    patch = pytest.MonkeyPatch()
    patch.delenv(location.DATA_DIR_ENV, raising=False)
    patch.setattr(location, "DEFAULT_DATA_DIR", str(tmp_path_factory.mktemp("no-data") / "CL_Benchmark"))
    patch.setattr(location, "DEFAULT_CACHE", str(tmp_path_factory.mktemp("default-cache")))
    yield
    patch.undo()


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def installed_env(tmp_path_factory) -> dict[str, str]:
    """The environment to run the installed console scripts in (`console_script`), from a folder outside the
    repository: without PYTHONPATH, so that only what the install provides is importable (`ray_jobs` included), when
    the installed jumplora is this checkout (an editable install, as in CI); with this checkout on PYTHONPATH when the
    install points at another one (a worktree tested with a shared environment), so that this code runs."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    found = subprocess.run([sys.executable, "-c", "import jumplora; print(jumplora.__file__)"], env=env,
                           cwd=tmp_path_factory.mktemp("outside"), capture_output=True, text=True)
    if found.returncode != 0 or Path(found.stdout.strip()).resolve().parents[1] != REPO:
        env["PYTHONPATH"] = str(REPO)
    return env


def console_script(name: str = "jumplora") -> str:
    """The installed console script `name`, beside the interpreter running the tests."""
    return str(Path(sys.executable).parent / name)
