"""EWC's diagonal empirical Fisher, its quadratic penalty and the seeded sample the Fisher is taken on (SPEC §7)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable

import torch

from jumplora.adapters import TaskAdapter
from jumplora.config import RunConfig
from jumplora.methods.registry import TaskContext


def fisher_diagonal(params: dict[str, torch.nn.Parameter], losses: Iterable[Callable[[], torch.Tensor]],
                    n_total: int) -> dict[str, torch.Tensor]:
    """Empirical diagonal Fisher F_i = (1/N) Σ_n (∂ log p(y_n|x_n) / ∂θ_i)², one fp32 tensor per parameter.

    Each closure builds the graph of one example's −log p(y_n|x_n) (a scalar), differentiated alone. N = `n_total`
    counts the examples of every data-parallel worker: a worker passes its slice, and the workers' results add up to
    F. The parameters' `.grad` and `requires_grad` are left as they were; an unused parameter contributes zero.
    """
    if n_total <= 0:
        raise ValueError(f"n_total must be positive, got {n_total}")
    names = list(params)
    tensors = [params[name] for name in names]
    sums = {name: torch.zeros_like(params[name], dtype=torch.float32) for name in names}
    flags = [tensor.requires_grad for tensor in tensors]
    try:
        for tensor in tensors:
            tensor.requires_grad_(True)
        with torch.enable_grad():
            for loss in losses:
                grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
                for name, grad in zip(names, grads, strict=True):
                    if grad is not None:
                        sums[name].add_(grad.detach().float().square())
    finally:
        for tensor, flag in zip(tensors, flags, strict=True):
            tensor.requires_grad_(flag)
    return {name: total.div_(n_total) for name, total in sums.items()}


def ewc_penalty(params: dict[str, torch.Tensor], fisher: dict[str, torch.Tensor],
                anchor: dict[str, torch.Tensor]) -> torch.Tensor:
    """P = Σ_i F_i (θ_i − θ*_i)² over the parameters named in `fisher`, in fp32 (a zero scalar when it is empty).

    `params` θ (with gradient, any shapes), `fisher` F and `anchor` θ* (constants of θ's shapes, on θ's device);
    ∂P/∂θ_i = 2 F_i (θ_i − θ*_i).
    """
    if not fisher:
        any_param = next(iter(params.values()), None)
        return torch.zeros((), device=any_param.device if any_param is not None else None)
    total = None
    for name, weight in fisher.items():
        diff = (params[name].float() - anchor[name].float()).reshape(-1)
        term = torch.dot(weight.float().reshape(-1) * diff, diff)
        total = term if total is None else total + term
    return total


def fisher_sample(n_examples: int, n_samples: int, seed: int, task_name: str) -> list[int]:
    """min(n_samples, n_examples) distinct indices of `range(n_examples)`, from a generator seeded by (seed,
    task_name) alone (the global RNG is not touched)."""
    rng = random.Random(f"{seed}/{task_name}/fisher")
    return rng.sample(range(n_examples), min(n_samples, n_examples))


class Ewc:
    """EWC (SPEC §7): L = CE + λ_t Σ_i F_i (θ_i − θ*_i)² over every parameter of the model. F, the sum over the past
    tasks of each task's diagonal Fisher, is the run's memory (one fp32 tensor per parameter name, on the training
    device); θ* = the weights when the task starts, which are those after the previous task."""

    def __init__(self, memory: dict[str, torch.Tensor], fisher_samples: int, seed: int) -> None:
        self.fisher = memory  # the run's memory itself: what is added here is checkpointed
        self.fisher_samples = fisher_samples
        self.seed = seed
        self.params: dict[str, torch.nn.Parameter] = {}
        self.anchor: dict[str, torch.Tensor] = {}

    @classmethod
    def from_config(cls, config: RunConfig, memory: dict[str, torch.Tensor]) -> Ewc:
        return cls(memory, fisher_samples=config.settings.ewc_fisher_samples, seed=config.seed)

    def start_task(self, adapter: TaskAdapter) -> None:
        """θ* ← a copy of the weights the task starts from (only where there is a Fisher: from task 2 on)."""
        self.params = dict(adapter.model.named_parameters())
        self.anchor = {name: self.params[name].detach().clone() for name in self.fisher}

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        if lam == 0 or not self.fisher:
            return None
        return lam * ewc_penalty(self.params, self.fisher, self.anchor)

    def after_task(self, context: TaskContext) -> None:
        """F += the task's Fisher at the trained weights: each worker takes its slice of the seeded sample of the
        task's training examples (the model in eval mode: no dropout), and the workers' sums are added up."""
        self.anchor = {}  # θ* of this task is no longer needed
        examples, shard = context.examples, context.shard
        sample = fisher_sample(len(examples), self.fisher_samples, self.seed, context.task)
        start, end = shard.bounds(len(sample))

        losses = [functools.partial(context.nll, examples[i]) for i in sample[start:end]]  # −log p(y | x) of each
        fisher = fisher_diagonal(dict(context.model.named_parameters()), losses, n_total=len(sample))
        shard.sum_all_(list(fisher.values()))  # one all-reduce for the whole model, not one per parameter
        for name, value in fisher.items():
            if name in self.fisher:
                self.fisher[name].add_(value)
            else:
                self.fisher[name] = value

