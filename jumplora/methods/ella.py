"""ELLA's penalty and the record of past merged updates it weighs against (SPEC §2)."""

from __future__ import annotations

import torch


def ella_penalty(deltas: dict[str, torch.Tensor], past: dict[str, torch.Tensor]) -> torch.Tensor:
    """P = (1/M) Σ_m ‖ΔW_eff,m ⊙ W_past,m‖_F² over the M modules present in `past` (0 when `past` is empty).

    `deltas` are the β-scaled effective updates of this step (with gradient); `past` holds constants.
    """
    names = [name for name in deltas if name in past]
    if not names:
        any_delta = next(iter(deltas.values()), None)
        return torch.zeros((), device=any_delta.device if any_delta is not None else None)
    total = sum((deltas[name] * past[name]).pow(2).sum() for name in names)
    return total / len(names)


class PastUpdates:
    """W_past: per module, the sum of every past task's merged update β·ΔW_final, kept on the training device."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}

    def add(self, updates: dict[str, torch.Tensor]) -> None:
        for name, update in updates.items():
            if name in self.weights:
                self.weights[name].add_(update)
            else:
                self.weights[name] = update.detach().clone()
