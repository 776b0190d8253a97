"""Fixtures of the Ray tests: one local Ray (2 CPUs) per module, the session's tiny-preset cache, smoke settings.

The tiny preset is built once per session (`tiny_cache` of tests/conftest.py; JUMPLORA_TEST_CACHE keeps it between
sessions) and before Ray starts, so no worker races to build it. The build happens in the setup of the first test that
uses `smoke_cache`: that test's timeout gets `BUILD_SECONDS` more, so every timeout stays a bound on the Ray work."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from jumplora import spaces
from jumplora.config import RunConfig
from jumplora.continual import prepare

RAY_CPUS = 2
SMOKE = {**spaces.preset("smoke"), "model_dropout": 0.0}  # dropout off: DDP and one process compute the same
SMOKE_ARGS = ["--preset", "smoke", "--model-dropout", "0"]
BUILD_SECONDS = 1500  # the tiny preset from scratch: ~5 min on 2 idle cores, over 10 when other jobs share them


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items) -> None:
    first = next((item for item in items if "smoke_cache" in getattr(item, "fixturenames", ())), None)
    marker = first.get_closest_marker("timeout") if first is not None else None
    if marker is not None and marker.args:
        first.add_marker(pytest.mark.timeout(marker.args[0] + BUILD_SECONDS), append=False)


@pytest.fixture(scope="session")
def smoke_cache(tiny_cache) -> Path:
    prepare(RunConfig(order=1, **SMOKE), tiny_cache, progress=False)  # builds the tiny preset if missing
    return tiny_cache


@pytest.fixture(scope="module")
def local_ray(smoke_cache):
    """A local Ray of 2 CPUs for the module; stopped afterwards so that the next module starts clean."""
    ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)  # never a `ray start`
    yield
    ray.shutdown()


def cli_args(cache: Path, storage: Path, *extra: str) -> list[str]:
    return [*SMOKE_ARGS, "--cache-dir", str(cache), "--storage-path", str(storage), *extra]
