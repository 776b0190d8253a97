"""An option of some method's settings that the chosen method does not read is refused when given, in one line naming
the option and the methods that read it: every method × every method-specific option, from the registry
(`MethodSpec.settings`, `AdapterKind.fields`), through the parser as a user gives it; the issue's cases by name."""

import pytest

from jumplora import options
from jumplora.cli import build_parser, main
from jumplora.config import RunConfig, setting_names
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS, check
from ray_jobs import train_sequence
from ray_jobs.cli import run_main

FIELDS = options.fields()


def read_by(method: str) -> set[str]:
    spec = METHODS[method]
    return {*setting_names(spec.settings), *spec.adapter.fields}


# the method-specific options a user can give: a field some method reads, shown by `jumplora run`
SPECIFIC = sorted({name for method in METHODS for name in read_by(method)} & set(options.command_fields("run")))
PAIRS = [(method, name) for method in METHODS for name in SPECIFIC]


def value_of(name: str) -> str:
    """The option's default as the command line writes it (given explicitly, it is still refused where unread)."""
    field = FIELDS[name]
    return str(field.metadata["choices"][0]) if field.metadata["choices"] else str(field.default)


def test_the_method_specific_options():
    assert {"full_lr", "olora_lambda1", "olora_lambda2", "threshold", "ewc_fisher_samples", "ella_delta", "rank",
            "bandwidth"} <= set(SPECIFIC)


@pytest.mark.parametrize(("method", "name"), PAIRS, ids=[f"{m}:{n}" for m, n in PAIRS])
def test_an_option_is_taken_exactly_by_the_methods_that_read_it(method, name):
    argv = ["run", "--method", method, f"--{name.replace('_', '-')}", value_of(name)]
    args = build_parser().parse_args(argv)
    if name in read_by(method):
        config = RunConfig.of(options.config_fields(args, "run"))
        assert check(config, options.given(args)) is METHODS[method]
        return
    with pytest.raises(JumpLoRAError) as refused:  # a method's own setting when the configuration is built
        check(RunConfig.of(options.config_fields(args, "run")), options.given(args))
    readers = [other for other in METHODS if name in read_by(other)]
    assert str(refused.value) == (f"--{name.replace('_', '-')} is a setting of {', '.join(readers)}, which {method} "
                                  "does not read: leave it out, or pass the --method that reads it")


@pytest.mark.parametrize(("argv", "readers"), [
    (["--method", "jumplora+ella", "--full-lr", "1e-3"], "--full-lr is a setting of seqft, ewc"),
    (["--method", "ella", "--olora-lambda1", "0.5"], "--olora-lambda1 is a setting of o-lora, jumplora+o-lora"),
    (["--method", "ella", "--olora-lambda2", "0.1"], "--olora-lambda2 is a setting of o-lora, jumplora+o-lora"),
    (["--method", "inclora", "--threshold", "global"], "--threshold is a setting of jumplora+inclora, jumplora+ella"),
    (["--method", "inclora", "--ewc-fisher-samples", "8"], "--ewc-fisher-samples is a setting of ewc,"),
])
def test_the_issues_cases_end_before_anything_loads(argv, readers, tmp_path, capsys):
    assert main(["run", "--quiet", "--out", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"jumplora: error: {readers}") and argv[1] in err[0]
    assert not any(tmp_path.iterdir())


def test_a_ray_script_refuses_them_too(capsys):
    assert run_main(train_sequence.SCRIPT, ["--preset", "smoke", "--method", "ella", "--threshold", "per_block"]) == 2
    assert capsys.readouterr().err.startswith("error: --threshold is a setting of jumplora+inclora")


def test_a_flag_is_noted_as_given_and_defaults_are_not():
    assert options.given(build_parser().parse_args(["run", "--strict", "--lr", "0.1"])) == {"strict", "lr"}
    assert options.given(build_parser().parse_args(["run"])) == frozenset()


def test_each_adapter_kind_reads_the_options_of_its_config():
    """Its config's option fields, as the kinds listed them by hand before they declared a config of options."""
    from jumplora.adapters import FULL, JUMPLORA, LORA

    assert LORA.fields == ("rank", "alpha", "lora_dropout")
    assert JUMPLORA.fields == ("rank", "alpha", "threshold", "bandwidth", "tau_reduction", "jump_start", "jump_final",
                               "jump_dropout")
    assert FULL.fields == ("full_lr",)
    with pytest.raises(JumpLoRAError, match="--bandwidth must be a number > 0, got 0"):  # its option's check, once
        JUMPLORA.settings(target_modules=("q",), bandwidth=0)


def test_each_adapter_kind_declares_whether_it_stacks_as_its_class_does():
    """`AdapterKind.stacks` is read without importing the adapter (the Ray driver packs trials by it): it says what
    the class it names says."""
    from jumplora.adapter_kinds import FULL, JUMPLORA, LORA, resolve

    for kind in (LORA, JUMPLORA, FULL):
        assert kind.stacks == resolve(kind.adapter).stacks
    assert (LORA.stacks, FULL.stacks) == (True, False)


@pytest.mark.parametrize(("method", "config", "label"), [
    ("jumplora+ella", {"threshold": "per_block", "jumplora+ella": {"ella_delta": "interpolated"}},
     "jumplora+ella (per_block, interpolated)"),
    ("jumplora+ella", {"threshold": "global", "ella_delta": "interpolated"}, "jumplora+ella (interpolated)"),  # older
    ("inclora", {"threshold": "per_block"}, "inclora"),  # a setting it does not read
    ("jumplora+inclora", {"tau_reduction": "sum"}, "jumplora+inclora (sum)"),
    ("not-installed", {"threshold": "per_block"}, "not-installed"),
])
def test_a_method_is_labelled_with_the_choices_it_reads_away_from_their_default(method, config, label):
    from jumplora.methods.registry import label as label_of

    assert label_of(method, config) == label
