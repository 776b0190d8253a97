"""`--help` documents every option of every command, each default stated once and never as "None"."""

import re

import pytest

from jumplora.cli import build_parser

COMMANDS = [["run"], ["eval"], ["report"], ["track"], ["orders"], ["data", "check"], ["data", "build"]]


def help_text(command: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*command, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare on single spaces


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_help_and_no_default_is_none_or_repeated(command, capsys):
    text = help_text(command, capsys)
    assert "(default: None)" not in text
    entries = [entry for entry in re.split(r"(?<!,)\s(?=--?[a-z])", text.split("options:")[1]) if entry.strip()]
    assert len(entries) > 1
    for entry in entries:
        assert entry.count("(default:") <= 1, entry
        assert len(entry.split()) > 1, f"option without help: {entry}"


def test_run_help_states_the_documented_defaults(capsys):
    text = help_text(["run"], capsys)
    for expected in ("continual method (default: jumplora+ella)", "(default: tiny)", "(default: 42)",
                     "class-stratified (default: all)", "global batch size (default: 32)",
                     "or 'synthetic' for the built-in synthetic benchmark (default: synthetic for the tiny model; any "
                     "other model: $JUMPLORA_DATA_DIR, else ~/.cache/jumplora/CL_Benchmark as `jumplora data build` "
                     "writes it, else an error)"):
        assert expected in text
