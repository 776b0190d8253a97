from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

from jumplora.adapters import AdapterKind
from jumplora.config import RunConfig


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


def make_llama(num_layers: int = 2, hidden: int = 64, seed: int = 0):
    """A random Llama-style decoder as small (vocab 50, hidden 64, 4 heads of 16): adapted q_proj/v_proj are 64×64."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=50, hidden_size=hidden, intermediate_size=128, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=16, pad_token_id=0, eos_token_id=1,
                         bos_token_id=None, max_position_embeddings=128)
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


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    """One cache for the whole session, so the tiny preset is built once (set JUMPLORA_TEST_CACHE to keep it)."""
    import os
    from pathlib import Path

    kept = os.environ.get("JUMPLORA_TEST_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("jumplora-cache")


@pytest.fixture(autouse=True, scope="session")
def _throwaway_tracking_store(tmp_path_factory):
    """Runs started by tests log to a throwaway MLflow store, never to the user's ./runs/mlflow.db."""
    import os

    patch = pytest.MonkeyPatch()
    if "MLFLOW_TRACKING_URI" not in os.environ:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}")
    yield
    patch.undo()


@pytest.fixture(autouse=True, scope="session")
def _no_data_of_this_machine(tmp_path_factory):
    """Runs started by tests find no data of the machine ($JUMPLORA_DATA_DIR, ~/.cache/jumplora/CL_Benchmark): a test
    that reads the real data names it."""
    from jumplora.data import location

    patch = pytest.MonkeyPatch()
    patch.delenv(location.DATA_DIR_ENV, raising=False)
    patch.setattr(location, "DEFAULT_DATA_DIR", str(tmp_path_factory.mktemp("no-data") / "CL_Benchmark"))
    yield
    patch.undo()


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def installed_env(tmp_path_factory) -> dict[str, str]:
    """The environment to run the installed console scripts in (`console_script`), from a folder outside the
    repository: without PYTHONPATH, so that only what the install provides is importable (`ray_jobs` included), when
    the installed jumplora is this checkout (an editable install, as in CI); with this checkout on PYTHONPATH when the
    install points at another one (a worktree tested with a shared environment), so that this code runs."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    found = subprocess.run([sys.executable, "-c", "import jumplora; print(jumplora.__file__)"], env=env,
                           cwd=tmp_path_factory.mktemp("outside"), capture_output=True, text=True)
    if found.returncode != 0 or Path(found.stdout.strip()).resolve().parents[1] != REPO:
        env["PYTHONPATH"] = str(REPO)
    return env


def console_script(name: str = "jumplora") -> str:
    """The installed console script `name`, beside the interpreter running the tests."""
    import sys

    return str(Path(sys.executable).parent / name)
