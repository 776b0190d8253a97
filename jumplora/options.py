"""Command-line options of `RunConfig` fields and of every registered method's own settings (a plugin's included),
built from the fields' metadata (`config.option`), the default stated in the help. A method's setting parses to None
when not given: the chosen method's settings take their defaults, and another method's is refused only when given
(`methods.check`). With `preset=True` (the Ray scripts) every default is None, so the preset's value is kept, else
the field's (`ray_jobs.cli.run_config`). An option only some methods read says which (`read_by`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from jumplora import ownership
from jumplora.config import OWN_SETTINGS, RUN_FIELDS, RunConfig, option_fields
from jumplora.data import location
from jumplora.data.location import DATA_DIR_ENV, DEFAULT_CACHE, DEFAULT_DATA_DIR, SYNTHETIC
from jumplora.errors import JumpLoRAError, path_error
from jumplora.families import CAUSAL, DEFAULT_TARGET_MODULES, SEQ2SEQ
from jumplora.kinds import WRITABLE, PathKind
from jumplora.methods import METHODS, readers, settings_fields

# the `{…}` values a field's help may name: facts whose home is another module
TEXT_VALUES = {"synthetic": SYNTHETIC, "data_dir_env": DATA_DIR_ENV, "default_data_dir": DEFAULT_DATA_DIR,
               "t5_targets": ",".join(DEFAULT_TARGET_MODULES[SEQ2SEQ]),
               "causal_targets": ",".join(DEFAULT_TARGET_MODULES[CAUSAL])}


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every command's help: appends `(default: …)` to an option's help, except where the help already speaks of its
    default or there is none to show (None: required, or "not given"; False: a flag, off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in help_text:
            return help_text
        return f"{help_text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """The parser of every command, its help written by `DefaultsHelpFormatter`. A usage error is a JumpLoRAError
    naming the help of the parser it belongs to (an unknown argument is refused by the subcommand given it, not passed
    up to `jumplora`); an OSError that a kind's check of a path raises is the option's line (`errors.path_error`),
    not a traceback from inside argparse."""

    see = "(see `{prog} --help`)"  # how the line points to the help

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str):
        raise JumpLoRAError(f"{message} {self.see.format(prog=self.prog)}")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:  # every command takes only its own arguments
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _get_value(self, action: argparse.Action, arg_string: str):
        try:
            return super()._get_value(action, arg_string)
        except OSError as error:
            refused = path_error(error)
            if refused is None:
                raise
            raise argparse.ArgumentError(action, str(refused)) from None


def fields() -> dict[str, dataclasses.Field]:
    """Every option's field by name: RunConfig's, then the registered methods' settings (a plugin's once loaded)."""
    return {**{field.name: field for field in option_fields(RunConfig)}, **settings_fields()}


def commands_of(field: dataclasses.Field) -> tuple[str, ...]:
    """The commands showing `field`'s option: a RunConfig field names them, a method's setting is OWN_SETTINGS'."""
    return field.metadata["commands"] if field.name in RUN_FIELDS else OWN_SETTINGS


def command_fields(command: str) -> tuple[str, ...]:
    """The fields whose options `command` shows (`config.COMMANDS`), RunConfig's in its order, then the settings."""
    return tuple(name for name, field in fields().items() if command in commands_of(field))


def read_by(name: str) -> str | None:
    """Which methods read the option `name` when only some do (`methods.readers`), as its help says it; None when
    every method (or none) reads it."""
    who = readers(name)
    others = [method for method in METHODS if method not in who]
    if not who or not others:
        return None
    return f"read by {', '.join(who)}" if len(who) <= len(others) else f"read by every method but {', '.join(others)}"


class Given(argparse.Action):
    """Stores the value (a flag: True) and notes the field as `given`, so that an option the method does not read is
    refused when given, whatever its value (`methods.check`)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True if self.nargs == 0 else values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def given(args: argparse.Namespace) -> frozenset[str]:
    """The RunConfig fields whose options `args` were given."""
    return getattr(args, "given", frozenset())


def add_config_options(parser: argparse.ArgumentParser, command: str, preset: bool = False,
                       helps: Mapping[str, str] | None = None, default_texts: Mapping[str, str] | None = None) -> None:
    """The options of `command`, `--name` of each field naming it (see the module's docstring); `helps` and
    `default_texts` replace a field's own texts where the command gives the option another meaning or default."""
    every = fields()
    for name in command_fields(command):
        field = every[name]
        default, default_text = field.default, (default_texts or {}).get(name) or field.metadata["default_text"]
        stated = (default_text or str(default)).format_map(TEXT_VALUES)
        choices = tuple(METHODS) if name == "method" else field.metadata["choices"]  # the registry's as it is now
        parsing = {"nargs": 0} if isinstance(default, bool) else {"type": field.metadata["kind"], "choices": choices}
        if name not in RUN_FIELDS:  # a method's setting (no preset holds one): its method's default
            default = None
        elif preset:
            default, stated = None, f"the preset's, else {stated}"
        help_text = ((helps or {}).get(name) or field.metadata["help"]).format_map(TEXT_VALUES)
        shown = "; ".join(part for part in (help_text, read_by(name)) if part)
        off = default is False and not default_text  # a flag: off unless given
        parser.add_argument(f"--{name.replace('_', '-')}", default=default, action=Given,
                            help=shown + ("" if off else f" (default: {stated})"), **parsing)


def config_fields(args: argparse.Namespace, command: str) -> dict:
    """The values of `command`'s options in `args`, for `RunConfig.of`; one at None (not given) is left out, so that
    RunConfig, the preset or the method's settings supply it."""
    return {name: getattr(args, name) for name in command_fields(command) if getattr(args, name) is not None}


def add_cache_dir(parser: argparse.ArgumentParser) -> None:
    """`--cache-dir` of every command that trains (declared here only, one default: `location.DEFAULT_CACHE`)."""
    ownership.writes(parser.add_argument("--cache-dir", type=PathKind(WRITABLE, result=Path),
                                         default=location.DEFAULT_CACHE,  # read when a parser is built
                                         help="where the tiny preset and single-task baselines are cached, on each "
                                              f"node of a Ray cluster (default: {DEFAULT_CACHE})"), ownership.CACHE)
