"""The options of RunConfig fields and of the methods' own settings, generated from the fields' metadata: each
defaults to the field's default (`jumplora run`; a method's setting: its method's), or with `preset` is left out
unless given (the Ray scripts keep the preset's value); each command shows exactly the fields whose metadata names it,
and the METHOD commands every method's settings."""

import argparse
import re

import pytest

from jumplora import options
from jumplora.cli import build_parser
from jumplora.config import COMMANDS, OWN_SETTINGS, RunConfig
from jumplora.continual import prepare
from jumplora.data.location import with_data_located
from jumplora.errors import JumpLoRAError
from jumplora.lambdas import resolve_lambdas

FIELDS = list(options.fields().values())
SETTINGS = {"ella_delta", "ewc_fisher_samples", "olora_lambda1", "olora_lambda2"}  # the built-in methods' own
# the parsed arguments of `jumplora`'s commands (the least each one needs; the Ray scripts':
# tests/ray_jobs/test_cli.py)
PARSED = {"run": ["run"], "eval": ["eval", ".", "--order", "1"], "data-check": ["data", "check", "."]}


def parser(command: str, preset: bool = False) -> argparse.ArgumentParser:
    built = argparse.ArgumentParser()
    options.add_config_options(built, command, preset=preset)
    return built


def test_every_field_has_help_and_names_known_commands():
    for field in FIELDS:
        assert isinstance(field.metadata["help"], str) and len(field.metadata["help"].split()) > 1, field.name
        assert set(field.metadata["commands"]) <= set(COMMANDS), field.name
    assert {field.name for field in FIELDS if not options.commands_of(field)} == \
        {"weight_decay", "grad_clip", "lora_dropout", "jump_dropout", "tau_reduction", "max_target_tokens"}
    assert {field.name for field in FIELDS if options.commands_of(field) == OWN_SETTINGS} >= SETTINGS


@pytest.mark.parametrize("command", PARSED)
def test_a_command_shows_exactly_the_fields_that_name_it(command):
    shown = set(vars(build_parser().parse_args(PARSED[command]))) & {field.name for field in FIELDS}
    own = {"data-check": {"strict"}}  # its own: exit 1 on any finding
    assert shown == set(options.command_fields(command)) | own.get(command, set())
    assert options.command_fields(command) == tuple(f.name for f in FIELDS if command in options.commands_of(f))


def test_the_commands_options_as_written_out():
    """What each command showed before the options were generated, plus --model-dropout in `jumplora run` and
    --order (no longer required) and --max-tasks in `jumplora eval`."""
    method = {"method", "threshold", "seed", "authors_compat", "full_lr"} | SETTINGS
    data = {"model", "data_dir", "max_train_per_task", "max_eval_per_task", "max_tasks", "micro_batches",
            "model_dropout", "target_modules"}
    assert set(options.command_fields("run")) == method | data | {
        "order", "lambdas", "strict", "batch_size", "lr", "rank", "alpha", "bandwidth", "jump_start", "jump_final",
        "max_source_tokens", "eval_batch_size", "eval_mode", "device", "precision", "single_task_baselines"}
    assert set(options.command_fields("eval")) == {"data_dir", "max_train_per_task", "max_eval_per_task", "strict",
                                                   "seed", "order", "max_tasks"}
    assert options.command_fields("data-check") == ("max_source_tokens",)
    assert set(options.command_fields("grid")) == method | data
    assert set(options.command_fields("sequence")) == method | data | {"order", "lambdas"}
    assert set(options.command_fields("reproduce")) == data | SETTINGS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_takes_its_fields_default(command):
    assert RunConfig.of(options.config_fields(parser(command).parse_args([]), command)) == RunConfig()


def test_help_states_the_defaults_and_the_registrys_methods():
    text = " ".join(parser("run").format_help().split())
    assert "global batch size (default: 32)" in text and "(default: the checkpoint's)" in text
    assert "(default: the model family's: q,v for T5, q_proj,v_proj for a causal LM)" in text
    assert "--method {inclora,jumplora+inclora,seqft,ella,jumplora+ella,ewc,o-lora,jumplora+o-lora,mtl}" in text
    assert "or 'synthetic' for the built-in synthetic benchmark (default: synthetic for the tiny model" in text
    assert not re.search(r"\{\w+\}", text)  # no `{name}` of `options.TEXT_VALUES` left unfilled


def test_jumplora_run_options_build_the_config():
    args = build_parser().parse_args(["run", "--lambdas", "0,1,2,3", "--max-tasks", "2", "--strict", "--lr", "0.01",
                                      "--model-dropout", "0", "--target-modules", "q, k"])
    config = RunConfig.of(options.config_fields(args, "run"))
    assert config == RunConfig(lambdas=[0.0, 1.0, 2.0, 3.0], max_tasks=2, strict=True, lr=0.01, model_dropout=0.0,
                               target_modules=("q", "k"))


def test_preset_options_are_left_out_unless_given():
    assert options.config_fields(parser("sequence", preset=True).parse_args([]), "sequence") == {}
    args = parser("sequence", preset=True).parse_args(["--seed", "7", "--authors-compat", "--model-dropout", "0",
                                                       "--lambdas", "paper-grid"])
    assert options.config_fields(args, "sequence") == {"seed": 7, "authors_compat": True, "model_dropout": 0.0,
                                                       "lambdas": "paper-grid"}
    assert "(default: the preset's, else 42)" in " ".join(parser("sequence", preset=True).format_help().split())


def test_jumplora_run_takes_the_paper_grid_table(tiny_cache):
    """`--lambdas paper-grid`: search_spaces/lambdas.yaml's grid results (SPEC §5) for order 4, JumpLoRA+ELLA,
    global τ, sparse ΔW, resolved as `jumplora run` resolves it; the configuration keeps the table's name."""
    args = build_parser().parse_args(["run", "--order", "4", "--lambdas", "paper-grid", "--max-tasks", "3",
                                      "--max-train-per-task", "96", "--max-eval-per-task", "8"])
    config = with_data_located(RunConfig.of(options.config_fields(args, "run")))
    assert resolve_lambdas(config, 15) == [0, 1e3, 1e5, 1e5, 1e5, 100, 1e4, 1e5, 1e4, 1e5, 1e5, 1e5, 1e4, 1e3, 1e5]
    ws = prepare(config, tiny_cache, progress=False)
    assert ws.lambdas == [0.0, 1e3, 1e5] and ws.config.to_dict()["lambdas"] == "paper-grid"
    with pytest.raises(JumpLoRAError, match="no paper-grid λ table for order 1"):
        resolve_lambdas(RunConfig(order=1, lambdas="paper-grid"), 4)
    assert resolve_lambdas(RunConfig(order=1, method="inclora", lambdas="paper-grid"), 4) == [0.0] * 4


def test_max_tasks_is_checked_like_the_other_caps():
    with pytest.raises(JumpLoRAError, match="^--max-tasks must be a number ≥ 1, got 0$"):
        RunConfig(max_tasks=0)
