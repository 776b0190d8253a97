"""The data location rule: `--data-dir` wins; the tiny model's runs stay synthetic; any other run takes
$JUMPLORA_DATA_DIR, else the default location once built, else one error naming `jumplora data build`."""

from __future__ import annotations

import pytest

from jumplora.config import RunConfig
from jumplora.data import location
from jumplora.data.location import with_data_located
from jumplora.errors import JumpLoRAError


@pytest.fixture
def default_dir(monkeypatch, tmp_path):
    folder = tmp_path / "default" / "CL_Benchmark"
    monkeypatch.setattr(location, "DEFAULT_DATA_DIR", str(folder))
    return folder


@pytest.mark.parametrize("synthetic_default", [True, False])
def test_the_given_directory_or_synthetic_wins(synthetic_default, monkeypatch):
    monkeypatch.setenv("JUMPLORA_DATA_DIR", "/from/the/environment")
    assert location.resolve_data_dir("/given", synthetic_default=synthetic_default) == "/given"
    assert location.resolve_data_dir("synthetic", synthetic_default=synthetic_default) is None


def test_a_synthetic_default_ignores_the_machines_data(monkeypatch, default_dir):
    monkeypatch.setenv("JUMPLORA_DATA_DIR", "/from/the/environment")
    default_dir.mkdir(parents=True)
    (default_dir / "tasks.json").write_text("{}")
    assert location.resolve_data_dir(None, synthetic_default=True) is None


def test_the_environment_comes_before_the_default_location(monkeypatch, default_dir):
    monkeypatch.setenv("JUMPLORA_DATA_DIR", "/from/the/environment")
    default_dir.mkdir(parents=True)
    (default_dir / "tasks.json").write_text("{}")
    assert location.resolve_data_dir(None, synthetic_default=False) == "/from/the/environment"


def test_the_default_location_is_used_once_it_holds_tasks_json(default_dir):
    default_dir.mkdir(parents=True)
    with pytest.raises(JumpLoRAError, match="no CL_Benchmark data at .*: build it there with `jumplora data build`"):
        location.resolve_data_dir(None, synthetic_default=False)
    (default_dir / "tasks.json").write_text("{}")
    assert location.resolve_data_dir(None, synthetic_default=False) == str(default_dir)


def test_the_model_decides_the_default(default_dir):
    assert with_data_located(RunConfig(model="tiny")).data_dir is None
    with pytest.raises(JumpLoRAError, match="jumplora data build"):
        with_data_located(RunConfig(model="google-t5/t5-small"))
    assert with_data_located(RunConfig(model="google-t5/t5-small", data_dir="synthetic")).data_dir is None
