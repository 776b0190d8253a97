"""A method plugin whose regulariser's loss returns a float (or a vector) is stopped on its first call, in one line
naming the method, not at step 1 with an AttributeError from deep in the step; a well-formed one trains."""

import pytest
import torch

from jumplora.adapters import LORA
from jumplora.config import RunConfig
from jumplora.data.encode import Encoded
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS, MethodSpec, register
from jumplora.training import train_task
from tests.conftest import make_t5


class Returns:
    """A regulariser whose loss returns `value` (made from the adapter's first parameter, with its gradient)."""

    def __init__(self, make):
        self.make = make

    def start_task(self, adapter) -> None:
        pass

    def loss(self, adapter, step: int, lam: float):
        return self.make(adapter.trainable_parameters()[0])

    def after_task(self, context) -> None:
        pass


EXAMPLES = [Encoded(input_ids=(5 + i % 7, 9, 1), label_ids=(3 + i % 2, 1), label="x") for i in range(12)]


def trained(name: str, make):
    spec = MethodSpec(name, adapter=LORA, regulariser=lambda config, memory: Returns(make))
    register(spec)
    config = RunConfig(method=name, batch_size=4, target_modules=("q", "v"))
    return train_task(make_t5(), EXAMPLES, task_name="a", task_seed=1, lams=[1.0], regularisers=[Returns(make)],
                      config=config, pad_id=0, device=torch.device("cpu"), progress=False).record(0)


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    monkeypatch.setattr(METHODS, "specs", dict(METHODS.specs))


@pytest.mark.parametrize(("make", "got"), [
    (lambda p: 0.5, "float 0.5"),
    (lambda p: (p * p).sum().item(), "float "),
    (lambda p: (p * p).sum(dim=0), "a tensor of shape (64,) and torch.float32"),
    (lambda p: torch.tensor(3), "a tensor of shape () and torch.int64"),
])
def test_a_loss_that_is_not_a_scalar_tensor_names_the_method(make, got):
    with pytest.raises(JumpLoRAError) as refused:
        trained("returns-odd", make)
    message = str(refused.value)
    assert message.startswith(f"method 'returns-odd': its regulariser's loss(adapter, step, lam) returned {got}")
    assert message.endswith("it must return a floating scalar tensor (with gradient) or None: fix the method's code")


def test_a_scalar_tensor_or_none_trains():
    record = trained("returns-scalar", lambda p: 0.01 * (p * p).sum())
    assert len(record.ce) == 3 and record.penalty[0] > 0
    assert trained("returns-none", lambda p: None).penalty == [0.0, 0.0, 0.0]
