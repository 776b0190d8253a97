"""O-LoRA's orthogonality and norm terms, and the stack of past tasks' lora_A they read (SPEC §7)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from jumplora.adapters import TaskAdapter
from jumplora.config import RunConfig
from jumplora.errors import JumpLoRAError
from jumplora.methods.registry import TaskContext


def orthogonality_loss(past_a: dict[str, torch.Tensor], current_a: dict[str, torch.Tensor]) -> torch.Tensor:
    """L_orth = Σ_m Σ_ij |(A_past,m A_t,mᵀ)_ij| over the modules m in both dicts (a zero scalar on the current
    adapters' device when none has a past).

    A_past,m (r·(t−1), d_in) is the past tasks' lora_A stacked (a constant), A_t,m (r, d_in) the current lora_A
    (with gradient); ∂L/∂A_t,m = sign(A_past,m A_t,mᵀ)ᵀ A_past,m.
    """
    names = [name for name in current_a if name in past_a]
    if not names:
        any_current = next(iter(current_a.values()), None)
        return torch.zeros((), device=any_current.device if any_current is not None else None)
    total = None
    for name in names:
        term = torch.mm(past_a[name], current_a[name].t()).abs().sum()
        total = term if total is None else total + term
    return total


def norm_loss(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """L_norm = Σ_P ‖P‖_F (the norm, not squared) over the tensors P (e.g. every current lora_A and lora_B); a zero
    scalar when there is none. Its gradient P / ‖P‖_F is zero at P = 0 (a fresh lora_B): never a NaN."""
    norms = [torch.linalg.vector_norm(param) for param in params]
    return sum(norms[1:], norms[0]) if norms else torch.zeros(())


def stack_past(past: torch.Tensor | None, a: torch.Tensor) -> torch.Tensor:
    """[A_past; A_t]: a task's lora_A (r, d_in), detached and copied, below the stack (r·(t−1), d_in) → (r·t, d_in)."""
    if past is None:
        return a.detach().clone()
    return torch.cat([past, a.detach()], dim=0)


class OLora:
    """O-LoRA (SPEC §7): L = CE + λ1 Σ_m Σ |A_past,m A_t,mᵀ| + λ2 Σ_m (‖A_t,m‖ + ‖B_t,m‖) on a fresh LoRA per task
    (merged after it, as IncLoRA). It remembers, per module, the past tasks' lora_A stacked (r·(t−1), d_in): the
    run's memory, on the training device. The run's per-task λ is not used: λ1 and λ2 are fixed (O-LoRA's 0.5, 0)."""

    def __init__(self, memory: dict[str, torch.Tensor], lambda1: float, lambda2: float) -> None:
        self.past_a = memory  # the run's memory itself: what is added here is checkpointed
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.factors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def from_config(cls, config: RunConfig, memory: dict[str, torch.Tensor]) -> OLora:
        return cls(memory, lambda1=config.settings.olora_lambda1, lambda2=config.settings.olora_lambda2)

    def start_task(self, adapter: TaskAdapter) -> None:
        """Hold this task's (A, B) parameters: the loss reads them, and A is kept after the merge."""
        self.factors = {name: (factor.a, factor.b) for name, factor in adapter.factors().items()}
        if not self.factors:
            raise JumpLoRAError("a fully fine-tuned model has no LoRA factors: O-LoRA needs an adapter method")

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        total = None
        if self.lambda1 > 0 and self.past_a:
            total = self.lambda1 * orthogonality_loss(self.past_a, {name: a for name, (a, _) in self.factors.items()})
        if self.lambda2 > 0:
            norms = self.lambda2 * norm_loss(p for pair in self.factors.values() for p in pair)
            total = norms if total is None else total + norms
        return total

    def after_task(self, context: TaskContext) -> None:
        """A_past ← [A_past; A_t] per module (the trained lora_A, detached)."""
        for name, (a, _) in self.factors.items():
            self.past_a[name] = stack_past(self.past_a.get(name), a.to(context.device))
        self.factors = {}

