"""How a step of `training.train_task` gives its K copies' losses on one piece of a batch (`StepMode`), chosen once for
a task: copy by copy (`CopyByCopy`) or one forward over K copies of the piece (`OneForward`, its random draws shared:
`SameDraws`). The two are the same up to the order of float operations (docs/DECISIONS.md). Each has `stage(batch)`,
a piece as it reads it, made before the first step, and `losses(batch, weight, n_tokens, step)`: the forward(s) and
backward(s) of a piece, and each copy's CE share (its summed label CE · `weight` / the global batch's `n_tokens`;
bf16 matmuls under `config.precision`, ΔW, the mask and τ fp32, CE fp32) and its regulariser's term
(`Terms.penalty`), detached, (K,) each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from jumplora.adapters import AdapterCopies, CopyView
from jumplora.losses import copies_label_ce, summed_label_ce
from jumplora.methods import Regulariser, checked_loss
from jumplora.precision import autocast

Batch = dict[str, torch.Tensor]


@dataclass
class Terms:
    """The K copies' regulariser terms: copy k's regulariser reads copy k (`views[k]`) with its λ."""

    adapter: AdapterCopies
    regularisers: Sequence[Regulariser | None]
    lams: Sequence[float]
    method: str
    pieces: int  # of a global batch
    device: torch.device

    def __post_init__(self) -> None:
        self.views = [CopyView(self.adapter, k) for k in range(self.adapter.copies)]

    def penalty(self, k: int, step: int) -> torch.Tensor:
        """Copy k's term of this forward, `regularisers[k].loss(view k, step, λ_k)` (zero without one), 1/pieces of it:
        it is the same in every piece of a global batch."""
        regulariser = self.regularisers[k]
        term = regulariser.loss(self.views[k], step, self.lams[k]) if regulariser is not None else None
        if step == 1:  # a method plugin's return checked once, where it can be named
            term = checked_loss(self.method, term)
        return term / self.pieces if term is not None else torch.zeros((), device=self.device)


@dataclass
class CopyByCopy:
    """Each copy's forward on the piece's own rows, with its λ alone's RNG state and shapes, then its backward: op for
    op as its λ alone, so bit-equal to it on a CPU (a GEMM there adds up in an order set by its shape)."""

    terms: Terms
    precision: str

    def stage(self, batch: Batch) -> Batch:
        return batch

    def losses(self, batch: Batch, weight: float, n_tokens: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        adapter, device, copies = self.terms.adapter, self.terms.device, self.terms.adapter.copies
        rng_devices = [device] if device.type == "cuda" else []
        ce, penalty = [], []
        for k in range(copies):  # each from the RNG state its λ alone has (the last one moves it on)
            with torch.random.fork_rng(rng_devices, enabled=k < copies - 1), adapter.route(k), \
                    autocast(device, self.precision):
                ce.append(summed_label_ce(adapter.model, batch) * weight / n_tokens)
            penalty.append(self.terms.penalty(k, step))
            (ce[k] + penalty[k]).backward()
        return torch.stack(ce).detach(), torch.stack(penalty).detach()


@dataclass
class OneForward:
    """One forward over K copies of the piece in blocks, block k through copy k (each kernel does K times the work,
    the frozen weights are read once), its random draws made once for one copy's shape and shared (`SameDraws`), then
    one backward of the sum of the K losses (the copies' parameters are disjoint, so each gradient is its own)."""

    terms: Terms
    precision: str

    def stage(self, batch: Batch) -> Batch:
        return {key: copies_of(value, self.terms.adapter.copies) for key, value in batch.items()}

    def losses(self, batch: Batch, weight: float, n_tokens: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        adapter, copies = self.terms.adapter, self.terms.adapter.copies
        with adapter.route(None), autocast(self.terms.device, self.precision), SameDraws(copies):
            ce = [value * weight / n_tokens for value in copies_label_ce(adapter.model, batch, copies)]
        penalty = [self.terms.penalty(k, step) for k in range(copies)]
        sum(c + p for c, p in zip(ce, penalty, strict=True)).backward()
        return torch.stack(ce).detach(), torch.stack(penalty).detach()


StepMode = CopyByCopy | OneForward


def copies_of(value: torch.Tensor, copies: int) -> torch.Tensor:
    """`value` repeated `copies` times along its first dimension (a batch → K copies of it, in blocks)."""
    return value.repeat(copies, *(1,) * (value.dim() - 1))


class SameDraws(TorchFunctionMode):
    """Inside: a random op on a batch of `copies` copies draws what it would draw on one copy, once, and applies it to
    every copy, so each λ gets the masks it gets alone. A dropout draws its mask for one copy's shape (the RNG advances
    exactly as for one λ alone) and the mask is tiled; an attention with dropout (`scaled_dot_product_attention`, which
    draws inside) runs once per copy from the same RNG state, leaving the state where one run leaves it."""

    def __init__(self, copies: int) -> None:
        super().__init__()
        self.copies = copies

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            return self.dropout(*args, **kwargs)
        if func is F.scaled_dot_product_attention and kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0):
            return self.replayed(func, args, kwargs)
        return func(*args, **kwargs)

    def dropout(self, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
        if not training or p == 0.0:  # draws nothing
            return F.dropout(input, p, training, inplace)
        one = input.new_ones((input.shape[0] // self.copies, *input.shape[1:]))
        return input * copies_of(F.dropout(one, p, True), self.copies)  # alone: input · (mask / (1 − p))

    def replayed(self, func, args, kwargs):
        rows = args[0].shape[0]

        def part(value, k: int):
            if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows:
                return value.chunk(self.copies)[k]
            return value

        devices = [args[0].device] if args[0].device.type == "cuda" else []
        outputs = []
        for k in range(self.copies):
            with torch.random.fork_rng(devices, enabled=k < self.copies - 1):
                outputs.append(func(*(part(a, k) for a in args), **{key: part(v, k) for key, v in kwargs.items()}))
        return torch.cat(outputs)
