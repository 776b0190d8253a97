"""Continual methods (SPEC §2, §7), registered by name (`registry`): which adapter trains each task and what the
regulariser adds to the loss and remembers of past tasks. One loop runs them all (`jumplora.continual`). Importing
this package registers the built-in methods; an installed package adds its own through the entry-point group
`jumplora.methods` (see `examples/l2_plugin`)."""

from __future__ import annotations

import torch

from jumplora.config import RunConfig

# the built-in methods, each module registering its own, in the order the commands list them
# isort: off
from jumplora.methods import incremental, ella, ewc, olora, mtl  # noqa: F401
# isort: on
from jumplora.methods.ella import Ella, adapter_penalty, ella_penalty, weighted_penalty
from jumplora.methods.ewc import Ewc
from jumplora.methods.olora import OLora
from jumplora.methods.registry import (
    METHODS,
    MethodSpec,
    Regulariser,
    TaskContext,
    adapter_kinds,
    check,
    checked_loss,
    get_method,
    plain_method,
    readers,
    register,
    settings_fields,
)


def make_regulariser(config: RunConfig, memory: dict[str, torch.Tensor]) -> Regulariser | None:
    """The regulariser of `config.method` over the run's `memory`, or None for a method with plain CE."""
    factory = get_method(config.method).regulariser
    return factory(config, memory) if factory is not None else None


__all__ = ["METHODS", "Ella", "Ewc", "MethodSpec", "OLora", "Regulariser", "TaskContext", "adapter_kinds",
           "adapter_penalty", "check", "checked_loss", "ella_penalty", "get_method", "make_regulariser",
           "plain_method", "readers", "register", "settings_fields", "weighted_penalty"]
