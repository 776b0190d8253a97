"""`--help` documents every option of every command, each default stated once and never as "None"; the README's option
list of `jumplora run` is its parser's (`python -m tests.cli.test_help` writes it), and every option the README names
is an option of the command it names; an option that only some methods read says which, as its refusal does; the
fewest optimizer steps of a task is stated where a user caps the examples (its refusal: test_bad_input.py)."""

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from jumplora import cli
from jumplora.cli import build_parser
from jumplora.methods import METHODS
from ray_jobs import grid_lambda, reproduce, train_sequence

COMMANDS = [["run"], ["eval"], ["report"], ["track"], ["orders"], ["data", "check"], ["data", "build"]]
README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- `jumplora run --help`, generated: begin -->", "<!-- `jumplora run --help`, generated: end -->"


def help_text(command: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*command, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare on single spaces


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_help_and_no_default_is_none_or_repeated(command, capsys):
    text = help_text(command, capsys)
    assert "(default: None)" not in text and "(default: False)" not in text
    entries = [entry for entry in re.split(r"(?<!,)\s(?=--?[a-z])", text.split("options:")[1]) if entry.strip()]
    assert len(entries) > 1
    for entry in entries:
        assert entry.count("(default:") <= 1, entry
        assert len(entry.split()) > 1, f"option without help: {entry}"


def test_run_help_states_the_documented_defaults(capsys):
    text = help_text(["run"], capsys)
    for expected in ("continual method (default: jumplora+ella)", "(default: tiny)", "(default: 42)",
                     "class-stratified; a task trains at least 3 optimizer steps (SPEC §1), so more than 2 × "
                     "--batch-size examples (default: all)", "global batch size (default: 32)",
                     "or 'synthetic' for the built-in synthetic benchmark (default: synthetic for the tiny model; any "
                     "other model: $JUMPLORA_DATA_DIR, else ~/.cache/jumplora/CL_Benchmark as `jumplora data build` "
                     "writes it, else an error)"):
        assert expected in text


def package_parser(monkeypatch, words: tuple[str, ...] = ("run",)) -> argparse.ArgumentParser:
    """The parser of `jumplora <words>` with the methods of this package only, as the README documents it: no
    plugin installed here, nor any a test registered."""
    plugins = {entry.name for entry in importlib.metadata.entry_points(group="jumplora.methods")}
    monkeypatch.setattr(METHODS, "specs", {name: spec for name, spec in METHODS.specs.items() if name not in plugins})
    monkeypatch.setattr(METHODS, "plugins_loaded", True)
    parser = build_parser()
    for word in words:
        parser = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)) \
            .choices[word]
    return parser


def options_markdown(parser: argparse.ArgumentParser) -> str:
    """The options of `parser` as a Markdown list, each as its --help states it (`<` escaped: it would open a tag)."""
    formatter = parser._get_formatter()
    lines = [f"- `{formatter._format_action_invocation(action)}`: {formatter._expand_help(action)}"
             for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    return "\n".join(line.replace("<", "\\<") for line in lines)


def readme_block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def test_the_readme_lists_the_options_of_jumplora_run_as_its_parser_states_them(monkeypatch):
    """Before: the README's hand-written list lacked --max-tasks, --lr, --rank, --quiet and --cache-dir, and called
    --full-lr O-LoRA's rate while the run refuses it for every method but seqft and ewc."""
    listed = readme_block(README.read_text())
    assert listed == options_markdown(package_parser(monkeypatch)), \
        "README.md's list of `jumplora run` options differs from its parser: `python -m tests.cli.test_help` writes it"
    for line in ("- `--max-tasks MAX_TASKS`: stop after the first N tasks of the order (default: all)",
                 "- `--lr LR`: AdamW learning rate (A, B and log τ) (default: 0.001)",
                 "- `--full-lr FULL_LR`: AdamW learning rate when every weight trains; read by seqft, ewc (default: "
                 "0.0001)",
                 "- `--quiet`: no progress bars or library messages: only jumplora's own warnings and its result",
                 "- `--max-train-per-task MAX_TRAIN_PER_TASK`: cap on training examples per task, class-stratified; "
                 "a task trains at least 3 optimizer steps (SPEC §1), so more than 2 × --batch-size examples "
                 "(default: all)"):
        assert line in listed.splitlines()


def every_option() -> dict[str, set[str]]:
    """command → its options' strings, for `jumplora`'s commands and the Ray scripts."""
    found = {}

    def visit(parser: argparse.ArgumentParser, name: str) -> None:
        found[name] = {string for action in parser._actions for string in action.option_strings}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, child in action.choices.items():
                    visit(child, f"{name} {word}")

    visit(build_parser(), "jumplora")
    for module in (grid_lambda, train_sequence, reproduce):
        parser = module.build_parser()
        found[parser.prog] = {string for action in parser._actions for string in action.option_strings}
    return found


# options the README names that no parser of this package has, each with why
NOT_OURS = {"--quick": "bench/run_all.py's (BENCH_ARGS=--quick)", "--l1-eps": "examples/l1_plugin's setting"}


def test_every_option_the_readme_names_is_one_of_the_command_it_names():
    """The synopsis of each row of the commands table (`jumplora data check DIR [--strict]`) names options of its own
    command; any other option named is some command's."""
    text, known = README.read_text(), every_option()
    synopses = [line.split("|")[1].strip(" `") for line in text.splitlines() if line.startswith("| `jumplora ")]
    assert len(synopses) == 7
    for synopsis in synopses:
        command = next(name for name in sorted(known, key=len, reverse=True) if synopsis.startswith(name))
        named = set(re.findall(r"--[a-z][a-z0-9-]*", synopsis))
        assert named <= known[command], f"{command}: the README names {sorted(named - known[command])}"
    anywhere = set().union(*known.values(), NOT_OURS)
    assert set(re.findall(r"--[a-z][a-z0-9-]*", text)) <= anywhere


def refusal(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    return line


# the options that only some methods read, as the help says it: by hand, from the methods' adapter kinds and settings
READ_BY = {
    "--threshold": "read by jumplora+inclora, jumplora+ella, jumplora+o-lora",
    "--full-lr": "read by seqft, ewc",
    "--rank": "read by every method but seqft, ewc",
    "--alpha": "read by every method but seqft, ewc",
    "--bandwidth": "read by jumplora+inclora, jumplora+ella, jumplora+o-lora",
    "--jump-start": "read by jumplora+inclora, jumplora+ella, jumplora+o-lora",
    "--jump-final": "read by jumplora+inclora, jumplora+ella, jumplora+o-lora",
    "--ella-delta": "read by ella, jumplora+ella",
    "--ewc-fisher-samples": "read by ewc",
    "--olora-lambda1": "read by o-lora, jumplora+o-lora",
    "--olora-lambda2": "read by o-lora, jumplora+o-lora",
}
VALUES = {"--threshold": "per_block", "--ella-delta": "interpolated", "--ewc-fisher-samples": "8", "--rank": "4"}


def test_an_option_some_methods_read_says_which_and_is_refused_with_the_others(monkeypatch, capsys, tmp_path):
    """Before: --full-lr's help named ewc and seqft by hand, the README called it O-LoRA's rate, and the other
    options of an adapter kind or a method said nothing of who reads them."""
    parser = package_parser(monkeypatch)
    helps = {action.option_strings[0]: action.help for action in parser._actions if action.option_strings}
    assert {option for option, text in helps.items() if "; read by " in text} == set(READ_BY)
    out = ["--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"), "--no-tracking"]
    for option, who in READ_BY.items():
        assert f"; {who} (default: " in helps[option]
        readers = who.removeprefix("read by ").split(", ") if "every method" not in who else \
            [method for method in METHODS if method not in who.split(" but ")[1].split(", ")]
        method = next(method for method in METHODS if method not in readers)
        line = refusal(["run", "--method", method, option, VALUES.get(option, "0.5"), *out], capsys)
        assert line == (f"jumplora: error: {option} is a setting of {', '.join(readers)}, which {method} does not "
                        "read: leave it out, or pass the --method that reads it")
    assert not any(tmp_path.iterdir())


def write_readme() -> None:
    """README.md with its list of `jumplora run` options as the parser states them now."""
    patch = pytest.MonkeyPatch()
    try:
        listed = options_markdown(package_parser(patch))
    finally:
        patch.undo()
    text = README.read_text()
    README.write_text(f"{text[:text.index(BEGIN) + len(BEGIN)]}\n{listed}\n{text[text.index(END):]}")


if __name__ == "__main__":
    write_readme()
    sys.exit(0)
