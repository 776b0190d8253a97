"""K adapters of one kind on one frozen base, trained together: the λ of a grid stage in one training
(`training.train_stack`, `continual.run_task_group`).

Every adapted linear is a `StackedLinear` with K copies of the adapter's parameters, each a tensor of its own. A
forward takes either the rows of one copy while `StackedAdapter.one(k)` is on (a CPU: the copies one after another,
each with its λ alone's operations, bit-equal to it), or a batch of K copies of each example (copy k: rows
k·B … (k+1)·B − 1; a GPU): rows of copy k go through adapter k, and all the frozen work of the model (every other
layer, and W's own product where the adapter adds its output) is done once over the K copies. Everything in the
model acts per example, so copy k's loss, and its gradient, are those of adapter k alone (docs/DECISIONS.md).

Each λ alone starts from `torch.manual_seed(task_seed)`, so its adapter starts from the same weights as every other
λ's: the stack builds the one adapter a λ alone builds (drawing from the RNG exactly as it does: PEFT's layer
initialisation included), copies its start values K times, and takes it off again. In a forward over K copies,
every random draw is made once, with the shape one λ alone draws, and serves all K copies (`SameDraws`): each λ gets
the masks it gets alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from jumplora.adapters.base import AdapterKind, Factors
from jumplora.adapters.jumplora import JUMPLORA, JumpLoraAdapter
from jumplora.adapters.jumplora.model import set_submodule
from jumplora.adapters.lora import ADAPTER_NAME, LORA, PeftLoraAdapter
from jumplora.config import RunConfig
from jumplora.errors import DivergedError
from jumplora.ops import jump_schedule, symmetric_jump, threshold_for_count

STACKED_KINDS = (JUMPLORA, LORA)  # the adapter kinds a stack trains; others (full fine-tuning) train one by one


def copies_of(value: torch.Tensor, copies: int) -> torch.Tensor:
    """`value` repeated `copies` times along its first dimension (a batch → K copies of it, in blocks)."""
    return value.repeat(copies, *(1,) * (value.dim() - 1))


class SameDraws(TorchFunctionMode):
    """Inside: a random op on a stacked batch of `copies` draws what it would draw on one copy, once, and applies it
    to every copy. A dropout draws its mask for one copy's shape (the RNG advances exactly as for one λ alone) and the
    mask is tiled; an attention with dropout (`scaled_dot_product_attention`, which draws inside) runs once per copy
    from the same RNG state, leaving the state where one run leaves it."""

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

        device = args[0].device
        state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
        outputs = []
        for k in range(self.copies):
            if device.type == "cuda":
                torch.cuda.set_rng_state(state, device)
            else:
                torch.set_rng_state(state)
            outputs.append(func(*(part(a, k) for a in args), **{key: part(v, k) for key, v in kwargs.items()}))
        return torch.cat(outputs)


def own_copies(value: torch.Tensor, copies: int) -> nn.ParameterList:
    """K parameters, each a copy of `value` with its shape: each copy's AdamW step and clipping then run on the
    tensors, and so in the order, of its λ alone (an elementwise kernel over one (K, …) tensor cuts its vector and
    thread chunks elsewhere: other last bits where a chunk's edge falls)."""
    return nn.ParameterList([nn.Parameter(value.detach().clone()) for _ in range(copies)])


class StackedThresholds(nn.Module):
    """K learnable τ_k = exp(log τ_k) (fp32) of one threshold group, each a parameter of its own as one λ alone's,
    and the group's γ (one schedule for all K)."""

    def __init__(self, log_tau: torch.Tensor, copies: int) -> None:
        super().__init__()
        self.log_tau = own_copies(log_tau, copies)
        self.gamma = 0.0
        self.initialized = False

    def tau(self, k: int) -> torch.Tensor:
        """τ_k, a scalar as one λ alone's `ThresholdGroup.tau`."""
        return self.log_tau[k].exp()


class StackedLinear(nn.Module):
    """A frozen `nn.Linear` W plus K low-rank updates, copy k of the batch through update k: plain LoRA
    (`thresholds` None) as PEFT's layer, y = x W^T + b + β · (dropout(x) A_k^T) B_k^T; JumpLoRA as `JumpLoraLinear`,
    y = x (W + β ΔW_interp,k)^T + b, or W's output + dropout(x) (β ΔW_interp,k)^T with dropout. With `active` = k
    the input is copy k's rows alone, computed op for op as its λ alone computes them (`copy_output`); else the
    input holds the K copies, W's product is done once over them and each copy's own part on its rows."""

    def __init__(self, base_layer: nn.Linear, a: torch.Tensor, b: torch.Tensor, scaling: float, dropout: float,
                 copies: int, thresholds: StackedThresholds | None = None, bandwidth: float = 0.0,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = own_copies(a, copies)  # K × (r, d_in)
        self.lora_B = own_copies(b, copies)  # K × (d_out, r)
        self.scaling, self.copies = scaling, copies
        self.dropout = dropout or None  # a probability; drawn through F.dropout, so `SameDraws` tiles it
        self.bandwidth, self.reduction = bandwidth, reduction
        object.__setattr__(self, "thresholds", thresholds)  # shared by the group's layers, not a child of each
        self.last_delta: list[torch.Tensor | None] = [None] * copies  # each copy's ΔW_k of the last forward
        self.active: int | None = None  # the copy a forward of one copy's rows goes through (`StackedAdapter.one`)

    def dropped(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout is not None else x

    def delta(self, k: int) -> torch.Tensor:
        """ΔW_k = B_k A_k, as one λ alone computes it."""
        return self.lora_B[k] @ self.lora_A[k]

    def adapted_weight(self, k: int, delta: torch.Tensor) -> torch.Tensor:
        """W + β ΔW_interp,k, or β ΔW_interp,k alone when dropout needs the separate matmul (`JumpLoraLinear`)."""
        gamma = self.thresholds.gamma
        if gamma != 0.0:
            jump = symmetric_jump(delta, self.thresholds.tau(k), self.bandwidth, self.reduction)
            delta = jump if gamma == 1.0 else torch.lerp(delta, jump, gamma)
        if self.dropout is None:
            return torch.add(self.base_layer.weight, delta, alpha=self.scaling)
        return self.scaling * delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (K·B, …), copy k's rows through update k (W's product once over the K copies where the update is added
        to W's output); or, while `active` is k, x: (B, …) of copy k alone, with the operations of its λ alone in
        their order (`copy_output`)."""
        if self.active is not None:
            return self.copy_output(self.active, x)
        if self.thresholds is not None and self.dropout is None:
            return torch.cat([self.copy_output(k, part) for k, part in enumerate(x.chunk(self.copies))])
        result = self.base_layer(x)
        return result + torch.cat([self.added(k, h) for k, h in enumerate(self.dropped(x).chunk(self.copies))])

    def copy_output(self, k: int, x: torch.Tensor) -> torch.Tensor:
        """Copy k's output on its rows x, as one λ alone computes it, op for op and in the same order (so that its
        backward, too, adds up the gradients reaching x in the same order): plain LoRA as PEFT's layer, W's output +
        B_k(A_k(dropout(x))) · β; JumpLoRA as `JumpLoraLinear`, x (W + β ΔW_interp,k)^T + b, or W's output +
        dropout(x) (β ΔW_interp,k)^T with dropout."""
        if self.thresholds is not None and self.dropout is None:
            weight = self.weight(k)
            return F.linear(x, weight.to(x.dtype), self.base_layer.bias)
        weight = self.weight(k) if self.thresholds is not None else None
        result = self.base_layer(x)
        return result + self.added(k, self.dropped(x), weight)

    def added(self, k: int, h: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """What copy k adds to W's output, on its rows after the adapter's dropout h: B_k(A_k(h)) · β, or h (β
        ΔW_interp,k)^T (`weight`, built here if not given)."""
        if self.thresholds is None:
            return F.linear(F.linear(h, self.lora_A[k]), self.lora_B[k]) * self.scaling
        weight = self.weight(k) if weight is None else weight
        return F.linear(h, weight.to(h.dtype))

    def weight(self, k: int) -> torch.Tensor:
        """JumpLoRA's W + β ΔW_interp,k (β ΔW_interp,k with dropout), from this forward's ΔW_k (kept for copy k's
        regulariser: ΔW is built once per forward); in fp32 under bf16 autocast, as `JumpLoraLinear`."""
        delta = self.delta(k)
        self.last_delta[k] = delta
        if torch.is_autocast_enabled(delta.device.type):
            with torch.autocast(delta.device.type, enabled=False):
                return self.adapted_weight(k, delta)
        return self.adapted_weight(k, delta)

    def hard_mask(self, delta: torch.Tensor, k: int) -> torch.Tensor:
        return delta.detach().abs() > self.thresholds.tau(k).detach().to(delta.dtype)

    def final_update(self, k: int) -> torch.Tensor:
        """β ΔW_final of copy k, as the adapter alone merges it: JumpLoRA's ΔW ⊙ H(|ΔW| − τ) once τ is set; PEFT's
        (B A) β."""
        with torch.no_grad():
            delta = self.delta(k)
            if self.thresholds is None:
                return delta * self.scaling
            if self.thresholds.initialized:
                delta = delta * self.hard_mask(delta, k)
            return self.scaling * delta


class StackedAdapter:
    """K fresh adapters of `kind` on `model` for one task, from the one start a λ alone has (see the module). It
    drives the schedule of all K (`before_step`, `after_step`: τ by count per copy), gives each copy's view
    (`views`: a `TaskAdapter` for that λ's regulariser), and after training (`finish`) puts the plain linears back
    with their start weights, keeping each copy's update for `merge`. A copy whose ΔW is not finite when τ is set
    fails alone (`errors`: the DivergedError that λ alone raises) and trains on, apart, until the end."""

    def __init__(self, kind: AdapterKind, model: nn.Module, config: RunConfig, total_steps: int, copies: int) -> None:
        self.model, self.copies, self.kind = model, copies, kind
        self.step = 0
        self.errors: dict[int, DivergedError] = {}
        alone = kind.build(model, config, total_steps)  # the RNG draws of one λ alone's adapter
        self.layers: dict[str, StackedLinear] = {}
        self.groups: dict[str, StackedThresholds] = {}
        if isinstance(alone, JumpLoraAdapter):
            self.schedule = (total_steps, alone.config.jump_start, alone.config.jump_final, alone.lag)
            self.s_start, self.lag = alone.s_start, alone.lag
            self.count_off_by_one = alone.config.authors_compat and alone.config.threshold == "global"
            for group_name, group in alone.groups.items():
                self.groups[group_name] = StackedThresholds(group.log_tau, copies)
            by_group = {id(group): self.groups[name] for name, group in alone.groups.items()}
            for name, layer in alone.layers.items():
                self.layers[name] = StackedLinear(
                    layer.base_layer, layer.lora_A, layer.lora_B, layer.scaling,
                    layer.dropout.p if layer.dropout is not None else 0.0, copies, by_group[id(layer.group)],
                    layer.bandwidth, layer.reduction)
                set_submodule(model, name, layer.base_layer)
        elif isinstance(alone, PeftLoraAdapter):
            for name, layer in alone.layers.items():
                dropout = layer.lora_dropout[ADAPTER_NAME]
                self.layers[name] = StackedLinear(
                    layer.get_base_layer(), layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight,
                    layer.scaling[ADAPTER_NAME], dropout.p if isinstance(dropout, nn.Dropout) else 0.0, copies)
            alone.peft_model.unload()  # the plain linears back, unmerged
            if hasattr(model, "peft_config"):
                del model.peft_config  # a plain model again, as after PEFT's merge (`PeftLoraAdapter.merge`)
        else:
            raise TypeError(f"the {kind.name} adapter does not stack: only {', '.join(k.name for k in STACKED_KINDS)}")
        self.start = {name: layer.base_layer.weight.detach().clone() for name, layer in self.layers.items()}
        for name, layer in self.layers.items():
            set_submodule(model, name, layer)
        self.updates: list[dict[str, torch.Tensor]] = []

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for k in range(self.copies) for p in self.copy_parameters(k)]

    def copy_parameters(self, k: int) -> list[nn.Parameter]:
        """Copy k's parameters, in the order of its λ alone's `trainable_parameters` (its clipping norm's order)."""
        params = [p for layer in self.layers.values() for p in (layer.lora_A[k], layer.lora_B[k])]
        return params + [group.log_tau[k] for group in self.groups.values()]

    @contextmanager
    def one(self, k: int) -> Iterator[None]:
        """Inside, the model's forward takes the rows of copy k alone, through its adapter only."""
        for layer in self.layers.values():
            layer.active = k
        try:
            yield
        finally:
            for layer in self.layers.values():
                layer.active = None

    def views(self) -> list[SliceView]:
        return [SliceView(self, k) for k in range(self.copies)]

    def before_step(self, step: int) -> None:
        """γ of optimizer step `step` for every copy (one schedule: the same steps)."""
        self.step = step
        if self.groups:
            gamma = jump_schedule(step, *self.schedule)
            for group in self.groups.values():
                group.gamma = gamma

    def after_step(self, step: int) -> None:
        """Right after step S_start: τ_k by count for each copy and group, as `JumpLoraAdapter.after_step` sets it."""
        if not self.groups or step != self.s_start:
            return
        with torch.no_grad():
            for group in self.groups.values():
                members = [layer for layer in self.layers.values() if layer.thresholds is group]
                n_lora = sum(layer.lora_A[0].numel() + layer.lora_B[0].numel() for layer in members)
                n_lora -= 1 if self.count_off_by_one else 0  # the authors' off-by-one of the global count
                for k in range(self.copies):
                    values = torch.cat([layer.delta(k).abs().reshape(-1) for layer in members])
                    try:
                        group.log_tau[k].fill_(math.log(float(threshold_for_count(values, n_lora))))
                    except DivergedError as error:  # this λ alone stops here; the others go on
                        self.errors.setdefault(k, error)
                        group.log_tau[k].fill_(math.nan)
                group.initialized = True

    def factors(self, k: int) -> dict[str, Factors]:
        masked = bool(self.groups) and self.step > self.s_start + self.lag
        return {name: slice_factors(layer, k, masked) for name, layer in self.layers.items()}

    def thresholds(self) -> list[dict[str, float]]:
        """τ per group of each copy, read back at once."""
        if not self.groups:
            return [{} for _ in range(self.copies)]
        values = torch.stack([group.tau(k).detach() for k in range(self.copies) for group in self.groups.values()])
        rows = values.reshape(self.copies, len(self.groups)).cpu().tolist()
        return [dict(zip(self.groups, row, strict=True)) for row in rows]

    def finish(self) -> None:
        """Keep each copy's β ΔW_final and put the plain linears back, with their start weights."""
        self.updates = [{name: layer.final_update(k) for name, layer in self.layers.items()}
                        for k in range(self.copies)]
        for name, layer in self.layers.items():
            set_submodule(self.model, name, layer.base_layer)

    def merge(self, k: int) -> dict[str, torch.Tensor]:
        """W ← W + β ΔW_final of copy k (after `finish`); returns that update per module."""
        with torch.no_grad():
            for name, update in self.updates[k].items():
                weight = self.layers[name].base_layer.weight
                weight.add_(update.to(weight.dtype))
        return self.updates[k]

    def restore(self) -> None:
        """The adapted modules' start weights back, bitwise (a merge is undone by copying, not by subtracting)."""
        with torch.no_grad():
            for name, layer in self.layers.items():
                layer.base_layer.weight.copy_(self.start[name])


def slice_factors(layer: StackedLinear, k: int, masked: bool) -> Factors:
    """Copy k's `Factors`: ΔW_k as this step's forward built it (JumpLoRA), or B_k A_k (plain LoRA, as PEFT's)."""

    def delta() -> torch.Tensor:
        if layer.thresholds is not None and layer.last_delta[k] is not None:
            return layer.last_delta[k]
        return layer.delta(k)

    mask: Callable[[], torch.Tensor | None] = (lambda: layer.hard_mask(delta(), k)) if masked else (lambda: None)
    gamma = layer.thresholds.gamma if layer.thresholds is not None else 0.0
    return Factors(a=layer.lora_A[k], b=layer.lora_B[k], scaling=layer.scaling, delta=delta, mask=mask, gamma=gamma)


class SliceView:
    """Copy k of a stack as a `TaskAdapter`: what its λ's regulariser reads (`factors`), so a method's regulariser
    runs unchanged. The stack steps every copy at once (its `before_step`, `after_step`), so those of a view do
    nothing; `merge` is the stack's merge of this copy."""

    def __init__(self, stack: StackedAdapter, k: int) -> None:
        self.stack, self.k, self.model = stack, k, stack.model

    def trainable_parameters(self) -> list[torch.Tensor]:
        return self.stack.copy_parameters(self.k)

    def before_step(self, step: int) -> None:
        """Driven by the stack."""

    def after_step(self, step: int) -> None:
        """Driven by the stack."""

    def factors(self) -> dict[str, Factors]:
        return self.stack.factors(self.k)

    def thresholds(self) -> dict[str, float]:
        return self.stack.thresholds()[self.k]

    def merge(self) -> dict[str, torch.Tensor]:
        return self.stack.merge(self.k)
