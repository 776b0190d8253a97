"""RunConfig refuses numbers that are not finite, each with one line naming the option."""

import math

import pytest

from jumplora.config import NUMBERS, RunConfig, parse_lambdas
from jumplora.errors import JumpLoRAError


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_number_that_is_not_finite_is_refused(name, value):
    with pytest.raises(JumpLoRAError, match=f"^--{name.replace('_', '-')} must be a finite number, got {value}$"):
        RunConfig(**{name: value})


def test_lambdas_that_are_not_finite_are_refused():
    with pytest.raises(JumpLoRAError, match=r"^--lambdas must be finite numbers, got \[0.0, nan, 1.0, 1.0\]$"):
        RunConfig(method="ella", lambdas=[0.0, math.nan, 1.0, 1.0])
    for text in ("0,1,nan,3", "0,inf,1,1", "0,1,-inf,3"):
        with pytest.raises(JumpLoRAError, match="--lambdas needs finite non-negative numbers"):
            parse_lambdas(text)
    assert parse_lambdas("0,1e3,1e5,0") == [0.0, 1e3, 1e5, 0.0]
    assert parse_lambdas(" paper-grid ") == "paper-grid" and parse_lambdas("paper") == "paper"
    with pytest.raises(JumpLoRAError, match="^--lambdas must be paper or paper-grid or numbers like 0,1e3,1e5; got "
                                            "'paper-gird'$"):
        parse_lambdas("paper-gird")
