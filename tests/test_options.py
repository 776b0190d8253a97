"""The shared options of RunConfig fields: each defaults to the field's default (`jumplora run`), or with `preset` is
left out unless given (the Ray scripts keep the preset's value)."""

import argparse
import dataclasses

import pytest

from jumplora import options
from jumplora.cli import RUN_OPTIONS, build_parser
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError


def parser(preset: bool = False) -> argparse.ArgumentParser:
    built = argparse.ArgumentParser()
    options.add_config_options(built, options.OPTIONS, preset=preset)
    return built


def test_every_option_is_a_field_whose_default_it_takes():
    assert set(options.OPTIONS) <= {field.name for field in dataclasses.fields(RunConfig)}
    assert RunConfig(**options.config_fields(parser().parse_args([]), options.OPTIONS)) == RunConfig()
    text = " ".join(parser().format_help().split())
    assert "global batch size (default: 32)" in text and "(default: the checkpoint's)" in text


def test_jumplora_run_options_build_the_config():
    args = build_parser().parse_args(["run", "--lambdas", "0,1,2,3", "--max-tasks", "2", "--strict", "--lr", "0.01"])
    config = RunConfig(**options.config_fields(args, RUN_OPTIONS))
    assert config == RunConfig(lambdas=[0.0, 1.0, 2.0, 3.0], max_tasks=2, strict=True, lr=0.01)
    assert RunConfig(**options.config_fields(build_parser().parse_args(["run"]), RUN_OPTIONS)) == RunConfig()


def test_preset_options_are_left_out_unless_given():
    assert options.config_fields(parser(preset=True).parse_args([]), options.OPTIONS) == {}
    args = parser(preset=True).parse_args(["--seed", "7", "--strict", "--model-dropout", "0"])
    assert options.config_fields(args, options.OPTIONS) == {"seed": 7, "strict": True, "model_dropout": 0.0}
    assert "(default: the preset's, else 42)" in " ".join(parser(preset=True).format_help().split())


def test_max_tasks_is_checked_like_the_other_caps():
    with pytest.raises(JumpLoRAError, match="--max-tasks must be ≥ 1, got 0"):
        RunConfig(max_tasks=0)
