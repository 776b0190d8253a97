"""The checker lives in docker/checks.py (a script, not a package): load it once for the tests of tests/docker."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_checks():
    name = "jumplora_docker_checks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docker" / "checks.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def checks():
    return _load_checks()


@pytest.fixture(scope="session")
def dockerfile_text():
    return (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def requirements_text():
    return (ROOT / "docker" / "requirements.txt").read_text(encoding="utf-8")
