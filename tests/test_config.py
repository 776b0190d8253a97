"""RunConfig and every method's settings refuse a value out of its field's kind and range (`config.option(kind=…)`),
each with one line naming the option: the check of a configuration that no parser saw (a preset, a saved
configuration)."""

import dataclasses
import math

import pytest

from jumplora import options
from jumplora.config import LAMBDA_VALUES, RunConfig, setting_names
from jumplora.errors import JumpLoRAError
from jumplora.kinds import Number
from jumplora.methods import METHODS

NUMBERS = [name for name, field in options.fields().items() if isinstance(field.metadata["kind"], Number)]


def config_with(name: str, value: object) -> RunConfig:
    """A RunConfig with `name` = `value`; a method's own setting is given to the first method that reads it."""
    method = next((m for m, spec in METHODS.items() if name in setting_names(spec.settings)), RunConfig.method)
    return RunConfig.of({"method": method, name: value})


def test_the_numbers_are_the_numeric_fields():
    assert {"lr", "seed", "batch_size", "model_dropout", "olora_lambda2", "jump_final"} <= set(NUMBERS)
    assert "method" not in NUMBERS and "device" not in NUMBERS


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_number_that_is_not_finite_is_refused(name, value):
    with pytest.raises(JumpLoRAError, match=f"^--{name.replace('_', '-')} must be a (whole|finite) number, got "):
        config_with(name, value)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("lr", 0.0, "--lr must be a number > 0, got 0.0"),
    ("model_dropout", 1.0, "--model-dropout must be a number in [0, 1), got 1.0"),
    ("seed", 2**32, "--seed must be a number in [0, 4294967295], got 4294967296"),
    ("batch_size", 2**70, "--batch-size must be a number ≥ 1 and at most 9223372036854775807 in size (int64 holds "
                          "no more), got 1180591620717411303424"),
    ("alpha", 1e300, "--alpha must be a number > 0 and at most 3.40282e+38 in size (float32 holds no more), got "
                     "1e+300"),
    ("batch_size", 2.0, "--batch-size must be a whole number, got 2.0"),
    ("threshold", "blocks", "--threshold must be one of global, per_block, got 'blocks'"),
    ("device", "mps", "--device must be auto, cpu, cuda or cuda:N, got 'mps'"),
    ("ewc_fisher_samples", 0, "--ewc-fisher-samples must be a number ≥ 1, got 0"),
    ("ella_delta", "dense", "--ella-delta must be one of sparse, interpolated, got 'dense'"),
])
def test_a_value_out_of_its_range_names_the_option_and_the_range(name, value, message):
    with pytest.raises(JumpLoRAError) as raised:
        config_with(name, value)
    assert str(raised.value) == message


def test_lambdas_that_are_not_finite_are_refused():
    with pytest.raises(JumpLoRAError, match=r"^--lambdas must be a finite number, got \[0.0, nan, 1.0, 1.0\]$"):
        RunConfig(method="ella", lambdas=[0.0, math.nan, 1.0, 1.0])
    assert LAMBDA_VALUES("0,1e3,1e5,0") == [0.0, 1e3, 1e5, 0.0]
    assert LAMBDA_VALUES(" paper-grid ") == "paper-grid" and LAMBDA_VALUES("paper") == "paper"
    with pytest.raises(Exception, match="^expected paper or paper-grid or a comma-separated list such as 0,1e3,1e5, "
                                        "got 'paper-gird'$"):
        LAMBDA_VALUES("paper-gird")


def test_bf16_on_a_gpu_that_does_not_compute_in_it_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(JumpLoRAError, match=r"^--precision bf16: the GPU of cuda does not compute in bf16: use "
                                            r"--precision fp32$"):
        RunConfig(precision="bf16", device="cuda")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert RunConfig(precision="bf16", device="cuda").precision == "bf16"


@pytest.mark.parametrize("method", list(METHODS))
def test_a_methods_own_settings_are_held_and_recorded_under_its_name(method):
    spec = METHODS[method]
    config = RunConfig(method=method)
    written = config.to_dict()
    assert (method in written) == (spec.settings is not None)
    if spec.settings is not None:  # its defaults, field by field, under its name and nowhere else
        defaults = {field.name: field.default for field in dataclasses.fields(spec.settings)}
        assert written[method] == defaults and not set(defaults) & set(written)
        assert config.settings == spec.settings(**defaults)
    assert RunConfig.of(written) == config and RunConfig.of(written).digest() == config.digest()


def test_settings_are_given_flat_nested_or_as_their_dataclass():
    from jumplora.methods.builtin import EwcSettings

    flat = RunConfig.of({"method": "ewc", "ewc_fisher_samples": 8, "seed": 3})
    assert flat == RunConfig.of({"method": "ewc", "ewc": {"ewc_fisher_samples": 8}, "seed": 3})
    assert flat == RunConfig(method="ewc", seed=3, settings=EwcSettings(ewc_fisher_samples=8))
    assert flat.to_dict()["ewc"] == {"ewc_fisher_samples": 8} and flat.setting("ewc_fisher_samples") == 8
    assert flat.setting("ella_delta") is None and flat.describe_settings() == "ewc_fisher_samples 8"
    assert flat.digest() != RunConfig(method="ewc", seed=3).digest()


def test_a_setting_the_method_does_not_read_is_refused_in_one_line():
    with pytest.raises(JumpLoRAError) as refused:
        RunConfig.of({"method": "inclora", "ella_delta": "sparse"})
    assert str(refused.value) == ("--ella-delta is a setting of ella, jumplora+ella, which inclora does not read: "
                                  "leave it out, or pass the --method that reads it")
    with pytest.raises(JumpLoRAError, match="^--l1-eps is not a setting of any method: leave it out$"):
        RunConfig.of({"method": "ewc", "l1_eps": 0.1})
    ewc = RunConfig(method="ewc")
    with pytest.raises(JumpLoRAError, match="^--ewc-fisher-samples is a setting of ewc, which seqft does not read"):
        dataclasses.replace(ewc, method="seqft")  # another method takes its own settings, not the old one's
    assert dataclasses.replace(ewc, method="seqft", settings=None).settings is None
