"""Continual methods (SPEC §2, §7), registered by name (`registry`): which adapter trains each task and what the
regulariser adds to the loss and remembers of past tasks. One loop runs them all (`jumplora.continual`). Importing
this package registers the built-in methods (`builtin`: declarations, no torch); an installed package adds its own
through the entry-point group `jumplora.methods` (see `examples/l2_plugin`). The regularisers' modules (`ella`, `ewc`,
`olora`) import torch: they are loaded when a training builds one (`make_regulariser`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jumplora.adapter_kinds import resolve
from jumplora.methods import builtin  # noqa: F401 - registers the built-in methods
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
    stacks,
)

if TYPE_CHECKING:
    import torch

    from jumplora.config import RunConfig

def make_regulariser(config: RunConfig, memory: dict[str, torch.Tensor]) -> Regulariser | None:
    """The regulariser of `config.method` over the run's `memory`, or None for a method with plain CE."""
    factory = get_method(config.method).regulariser
    return resolve(factory)(config, memory) if factory is not None else None


__all__ = ["METHODS", "MethodSpec", "Regulariser", "TaskContext", "adapter_kinds", "check", "checked_loss",
           "get_method", "make_regulariser", "plain_method", "readers", "register", "settings_fields", "stacks"]
