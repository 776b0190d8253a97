"""RunConfig refuses a value out of its field's kind and range (`config.option(kind=…)`), each with one line naming
the option: the check of a configuration that no parser saw (a preset, a saved configuration)."""

import dataclasses
import math

import pytest

from jumplora.config import LAMBDA_VALUES, RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.kinds import Number

NUMBERS = [field.name for field in dataclasses.fields(RunConfig) if isinstance(field.metadata["kind"], Number)]


def test_the_numbers_are_the_numeric_fields():
    assert {"lr", "seed", "batch_size", "model_dropout", "olora_lambda2", "jump_final"} <= set(NUMBERS)
    assert "method" not in NUMBERS and "device" not in NUMBERS


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_number_that_is_not_finite_is_refused(name, value):
    with pytest.raises(JumpLoRAError, match=f"^--{name.replace('_', '-')} must be a (whole|finite) number, got "):
        RunConfig(**{name: value})


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
])
def test_a_value_out_of_its_range_names_the_option_and_the_range(name, value, message):
    with pytest.raises(JumpLoRAError) as raised:
        RunConfig(**{name: value})
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
