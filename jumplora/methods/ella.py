"""ELLA (SPEC §2): its penalty and the record of past merged updates it weighs against (declared in `builtin`)."""

from __future__ import annotations

import torch

from jumplora.adapters import Factors, TaskAdapter
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.methods.registry import TaskContext


def ella_penalty(deltas: dict[str, torch.Tensor], past: dict[str, torch.Tensor]) -> torch.Tensor:
    """P = (1/M) Σ_m ‖ΔW_eff,m ⊙ W_past,m‖_F² over the M modules present in `past` (0 when `past` is empty).

    `deltas` are the β-scaled effective updates of this step (with gradient); `past` holds constants.
    """
    any_delta = next(iter(deltas.values()), None)
    return weighted_penalty([(deltas[name], past[name], 1.0) for name in deltas if name in past],
                            device=any_delta.device if any_delta is not None else None)


def weighted_penalty(terms: list[tuple[torch.Tensor, torch.Tensor, float]],
                     device: torch.device | None = None) -> torch.Tensor:
    """(1/M) Σ_m s_m² ‖Δ_m ⊙ K_m‖_F² over M terms (Δ with gradient, K a constant tensor, s a number); a zero on
    `device` when there is no term.

    ELLA's P with the scale β and any constant mask of ΔW_eff folded into (K, s): the only full-size tensor kept for
    the backward is Δ ⊙ K, and ‖·‖² is one dot product (no squared copy).
    """
    if not terms:
        return torch.zeros((), device=device)
    total = None
    for delta, weight, scale in terms:
        product = (delta * weight).reshape(-1)
        term = torch.dot(product, product) * (scale * scale)
        total = term if total is None else total + term
    return total / len(terms)


def adapter_penalty(factors: dict[str, Factors], mode: str, past: dict[str, torch.Tensor]) -> torch.Tensor:
    """ELLA's P (SPEC §2) over this step's β · ΔW_eff of the modules in `past`, without full-size temporaries.

    ΔW_eff: ΔW until the jump is in effect (`Factors.mask` None), then `sparse`: ΔW ⊙ H(|ΔW| − τ), `interpolated`:
    γ·(ΔW ⊙ H) + (1 − γ)·ΔW. The mask is hard: P sends no gradient to τ. β ΔW_eff ⊙ W_past = β · ΔW ⊙ (c ⊙ W_past)
    with the constant c = H (sparse) or γH + 1 − γ (interpolated), so c ⊙ W_past is built without gradient and
    ΔW ⊙ (c ⊙ W_past) is the one tensor kept.
    """
    terms = []
    device = None
    for name, factor in factors.items():
        device = factor.a.device
        if name not in past:
            continue
        delta, weight, mask = factor.delta(), past[name], factor.mask()
        if mask is not None:
            with torch.no_grad():
                dense_share = 0.0 if mode == "sparse" else 1.0 - factor.gamma
                weight = torch.where(mask, weight, weight * dense_share if dense_share else 0.0)
        terms.append((delta, weight, factor.scaling))
    return weighted_penalty(terms, device=device)


class Ella:
    """ELLA (SPEC §2): L = CE + λ_t · P, P weighing this task's update against W_past, which it remembers: per
    module, the sum of every past task's merged update β·ΔW_final (`memory`, on the training device)."""

    def __init__(self, memory: dict[str, torch.Tensor], mode: str) -> None:
        self.w_past = memory  # the run's memory itself: what is added here is checkpointed
        self.mode = mode  # ΔW_eff of a JumpLoRA adapter: "sparse" or "interpolated"

    @classmethod
    def from_config(cls, config: RunConfig, memory: dict[str, torch.Tensor]) -> Ella:
        return cls(memory, config.settings.ella_delta)

    def start_task(self, adapter: TaskAdapter) -> None:
        """Nothing to note before training (W_past is all ELLA needs); refuse an adapter without a low-rank update."""
        if not adapter.factors():
            raise JumpLoRAError("ELLA's penalty needs a LoRA update: use ella or jumplora+ella")

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        if lam == 0 or not self.w_past:  # task 1 (P = 0) or λ = 0: no penalty graph at all
            return None
        return lam * adapter_penalty(adapter.factors(), self.mode, self.w_past)

    def after_task(self, context: TaskContext) -> None:
        """W_past += β ΔW_final, on the training device."""
        self.remember(context.update, context.device)

    def remember(self, updates: dict[str, torch.Tensor], device: torch.device) -> None:
        for name, update in updates.items():
            if name in self.w_past:
                self.w_past[name].add_(update.to(device))
            else:
                self.w_past[name] = update.detach().to(device, copy=True)

