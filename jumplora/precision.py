"""bf16 training and evaluation (`--precision bf16`): autocast of the forward on the run's device, with the frozen
linear weights cast to bf16 once per task instead of by autocast in every forward (why, and what stays fp32:
docs/DECISIONS.md "Precision")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

LOW = torch.bfloat16


def autocast(device: torch.device | str, precision: str) -> torch.autocast:
    """bf16 autocast on `device`'s type when `precision` is "bf16" (a disabled context for fp32). The run refuses bf16
    off CUDA (`config.check_precision`); the context follows the device so that the same code runs under CPU
    autocast in tests."""
    return torch.autocast(torch.device(device).type, dtype=LOW, enabled=precision == "bf16")


@contextmanager
def frozen_in_bf16(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Inside: every frozen fp32 weight and bias of an `nn.Linear` of `model` is a bf16 copy (made once, here);
    on leaving, the fp32 parameters themselves are put back (a tied output layer is tied again: its parameter object
    is the embedding's). Trainable parameters (adapters, full fine-tuning) are left alone. `enabled=False` changes
    nothing."""
    kept: list[tuple[nn.Linear, str, nn.Parameter]] = []
    if enabled:
        # the base linears whose fp32 W an adapted layer reads itself (`reads_weight`: JumpLoRA's W + β ΔW_interp)
        skip = {id(m.base_layer) for m in model.modules() if getattr(m, "reads_weight", False)}
        for module in model.modules():
            if not isinstance(module, nn.Linear) or id(module) in skip:
                continue
            for name in ("weight", "bias"):
                param = getattr(module, name)
                if param is not None and not param.requires_grad and param.dtype == torch.float32:
                    kept.append((module, name, param))
                    setattr(module, name, nn.Parameter(param.detach().to(LOW), requires_grad=False))
    try:
        yield
    finally:
        for module, name, param in kept:
            setattr(module, name, param)
