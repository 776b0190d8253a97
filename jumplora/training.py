"""Training one task: K ≥ 1 copies of a fresh adapter (or every weight), one per λ, one epoch of AdamW on CE + each
λ's regulariser; each copy's update kept to be merged (SPEC §1–§3, §7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from tqdm.auto import tqdm

from jumplora.adapters import AdapterCopies, CopyView
from jumplora.config import RunConfig
from jumplora.data.encode import Encoded, collate, epoch_order, global_batches
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import DivergedError
from jumplora.families import is_causal
from jumplora.losses import copies_label_ce, summed_label_ce
from jumplora.methods import Regulariser, checked_loss, get_method
from jumplora.precision import autocast, frozen_in_bf16
from jumplora.record import TaskRecord
from jumplora.steps import Watch, check_enough_steps


def worker_pieces(train: list[Encoded], idx: list[int], rank: int, world: int, pieces: int, pad_id: int,
                  device: torch.device, causal: bool) -> list[tuple[dict[str, torch.Tensor], float]]:
    """Worker `rank`'s pieces of the global batch `idx` (piece k: idx[k::pieces], for k = rank, rank + world, ...),
    collated on the device (`encode.collate`), each with its CE weight. An empty piece of a short last batch
    still takes part: it runs the forward on the batch's first example with weight 0, so it builds ΔW for λ·P and
    all-reduces the same gradients (CE part zero)."""
    staged = []
    for k in range(rank, pieces, world):
        members = idx[k::pieces]
        staged.append((collate([train[i] for i in members or idx[:1]], pad_id, device, causal),
                       1.0 if members else 0.0))
    return staged


Staged = list[tuple[list[tuple[dict[str, torch.Tensor], float]], int]]


def stage_steps(model, train: list[Encoded], task_name: str, config: RunConfig, pad_id: int, device: torch.device,
                shard: Shard) -> tuple[Staged, int]:
    """Every step's pieces of this worker (`worker_pieces`), collated and moved to the device before the first step
    (no collation or host→device copy in the loop), each step with its global batch's label-token count; and how
    many pieces a global batch is cut into."""
    check_enough_steps(task_name, len(train), config.batch_size)
    batches = global_batches(epoch_order(len(train), config.seed, task_name), config.batch_size)
    pieces = shard.world * config.micro_batches
    causal = is_causal(model)
    return [(worker_pieces(train, idx, shard.rank, shard.world, pieces, pad_id, device, causal),
             sum(len(train[i].label_ids) for i in idx)) for idx in batches], pieces


@dataclass
class Trained:
    """What `train_task` leaves: each λ's outcome in the order of its `lams`, its record (curves, τ, its update on the
    CPU; accuracy rows filled by the loop) or the DivergedError it stopped with; and the adapter, off the model, which
    holds its start weights again, to put λ k's update in (`adapter.merge(k)`; the loop takes it out again)."""

    outcomes: list[TaskRecord | DivergedError]
    adapter: AdapterCopies

    def record(self, k: int) -> TaskRecord:
        """λ k's record; raises the DivergedError it stopped with."""
        outcome = self.outcomes[k]
        if isinstance(outcome, DivergedError):
            raise outcome
        return outcome


def train_task(
    model,
    train: list[Encoded],
    *,
    task_name: str,
    task_seed: int,
    lams: Sequence[float],
    regularisers: Sequence[Regulariser | None],
    config: RunConfig,
    pad_id: int,
    device: torch.device,
    shard: Shard = SINGLE,
    progress: bool = True,
    watch: Watch | None = None,
    one_forward: bool | None = None,
) -> Trained:
    """Train K = len(`lams`) fresh copies of the method's adapter for one epoch on `train`, copy k for λ k with its
    regulariser `regularisers[k]` (its own memory): its loss is CE plus `regularisers[k].loss(view k, step, λ_k)`
    (ELLA's λ·P, EWC's λ·Σ F (θ − θ*)², O-LoRA's terms) when given. Every copy starts from the one start a λ alone
    has, has its own AdamW state (one AdamW over every copy's parameters: it acts per tensor, and every copy has the
    same rate), is clipped by its own norm and logs its own loss curve: each λ trains as it would alone (K = 1). A copy
    whose ΔW is not finite when τ is set stops alone (its outcome is that DivergedError); when all have, training
    stops there. Returns each λ's outcome and the adapter, off the model (`Trained`).

    Two modes, the same up to the order of float operations (docs/DECISIONS.md): copy by copy (`one_forward` False,
    the default on a CPU), each copy's forward on the piece's own rows, with its λ alone's RNG state and shapes, then
    its backward: op for op as its λ alone, so bit-equal to it on a CPU (a GEMM there adds up in an order set by its
    shape); and one forward over K copies of each piece (the default on a GPU: each kernel does K times the work, the
    frozen weights are read once), its random draws made once for one copy's shape and shared (`SameDraws`), then one
    backward of the sum of the K losses (the copies' parameters are disjoint, so each gradient is its own).

    Every worker of a data-parallel run calls this with the same arguments but its own `shard`: it takes its pieces
    of every global batch, and `shard.sum_gradients` sums the workers' gradients. The loss is the summed label CE
    divided by the *global* batch's label-token count, so the sum over shards is exactly the single-process mean.
    With `config.micro_batches = m` a global batch is cut into `world · m` pieces (piece k: examples k, k + world·m,
    ...) and worker `rank` runs pieces rank, rank + world, ... one after another, accumulating their gradients: one
    worker with m = 2 adds up the same two pieces as two workers with m = 1.

    `watch` (a λ search's rungs, K = 1): its callback runs after the steps it names; other steps see one set lookup,
    no host synchronisation.
    """
    copies, world = len(lams), shard.world
    # one copy is its own forward in either mode
    stacked = copies > 1 and (device.type == "cuda" if one_forward is None else one_forward)
    staged, pieces = stage_steps(model, train, task_name, config, pad_id, device, shard)
    if stacked:
        staged = [([({key: copies_of(value, copies) for key, value in batch.items()}, weight)
                    for batch, weight in mine], n_tokens) for mine, n_tokens in staged]

    kind = get_method(config.method).adapter
    torch.manual_seed(task_seed)  # adapter init and dropout masks depend on (seed, task) only: resumable
    adapter = kind.build(model, config, total_steps=len(staged), copies=copies)
    views = [CopyView(adapter, k) for k in range(copies)]
    for regulariser, view in zip(regularisers, views, strict=True):
        if regulariser is not None:
            regulariser.start_task(view)
    params = [p for k in range(copies) for p in adapter.trainable_parameters(k)]
    # fused AdamW on CUDA: one kernel for every parameter, its step counters on the device (the default kernel keeps
    # them on the host and reads them); on the CPU the default kernel (the fused CPU one rounds differently)
    optimizer = torch.optim.AdamW(params, lr=kind.lr(config), weight_decay=config.weight_decay,
                                  fused=device.type == "cuda")
    rng_devices = [device] if device.type == "cuda" else []
    desc = f"train {task_name}" + (f" ×{copies}" if copies > 1 else "")

    def penalty_of(k: int, step: int) -> torch.Tensor:
        """Copy k's term of this forward, 1/pieces of it: built from this forward's weights, identical in every piece,
        so each piece counts 1/pieces of it."""
        term = regularisers[k].loss(views[k], step, lams[k]) if regularisers[k] is not None else None
        if step == 1:  # a method plugin's return checked once, where it can be named
            term = checked_loss(config.method, term)
        return term / pieces if term is not None else torch.zeros((), device=device)

    model.train()
    ce_values: list[torch.Tensor] = []
    penalty_values: list[torch.Tensor] = []
    # No host sync in a step: the losses stay on the device until the loop ends (read back once, below), and nothing
    # in the step reads a tensor's value on the host (not τ either), so a GPU is fed without waiting.
    try:
        with frozen_in_bf16(model, config.precision == "bf16"):  # bf16: the frozen linears cast once for the task
            for step, (my_pieces, n_tokens) in enumerate(tqdm(staged, desc=desc, disable=not progress, leave=False),
                                                         start=1):
                adapter.before_step(step)  # γ for this step
                optimizer.zero_grad(set_to_none=True)
                ce = penalty = torch.zeros(copies, device=device)
                for batch, weight in my_pieces:  # backward per piece: the gradients add up to this worker's share
                    if stacked:
                        # bf16 matmuls; ΔW, the mask and τ stay fp32, CE in fp32
                        with adapter.route(None), autocast(device, config.precision), SameDraws(copies):
                            piece_ce = [value * weight / n_tokens for value in copies_label_ce(model, batch, copies)]
                        piece_penalty = [penalty_of(k, step) for k in range(copies)]
                        sum(c + p for c, p in zip(piece_ce, piece_penalty, strict=True)).backward()
                    else:
                        piece_ce, piece_penalty = [], []
                        for k in range(copies):  # each from the RNG state its λ alone has (the last one moves it on)
                            with torch.random.fork_rng(rng_devices, enabled=k < copies - 1), adapter.route(k), \
                                    autocast(device, config.precision):
                                piece_ce.append(summed_label_ce(model, batch) * weight / n_tokens)  # its share
                            piece_penalty.append(penalty_of(k, step))
                            (piece_ce[k] + piece_penalty[k]).backward()
                    ce = ce + torch.stack(piece_ce).detach()
                    penalty = penalty + torch.stack(piece_penalty).detach()
                for p in params:  # as the authors' graph (jump branch in it at γ = 0): log τ takes a zero gradient,
                    if p.grad is None:  # so AdamW counts every step (step counter, bias correction, moment decay)
                        p.grad = torch.zeros_like(p)
                shard.sum_gradients(params)
                for k in range(copies):  # each copy by its own norm, as its λ alone: a non-finite one touches no other
                    torch.nn.utils.clip_grad_norm_(adapter.trainable_parameters(k), config.grad_clip)
                optimizer.step()
                ce_values.append(ce)  # kept on the device: read back once after the loop, not per step
                penalty_values.append(penalty)
                adapter.after_step(step)  # sets τ by count right after step S_start
                if len(adapter.errors) == copies:
                    break
                if watch is not None and step in watch.steps:  # a rung: the model is read, not changed
                    watch.callback(step)
    finally:  # however the loop ends, the model is plain again
        updates = adapter.finish()
        model.eval()

    ce_rows = torch.stack(ce_values).cpu()  # (steps, K), read back once
    if world > 1:  # each worker logged its share of the global batch's CE
        ce_rows = shard.sum_(ce_rows.to(torch.float64).to(device)).cpu()
    penalty_rows = torch.stack(penalty_values).cpu()
    thresholds = adapter.thresholds()
    outcomes: list[TaskRecord | DivergedError] = []
    for k, lam in enumerate(lams):
        update = {name: u.cpu() for name, u in updates[k].items()}
        outcomes.append(adapter.errors.get(k) or TaskRecord(
            task=task_name, lam=lam, ce=ce_rows[:, k].tolist(), thresholds=thresholds[k], update=update,
            penalty=[value * world for value in penalty_rows[:, k].tolist()],  # each worker added 1/world of λ·P
            sparsity=TaskRecord.sparsity_of(update)))
    return Trained(outcomes, adapter)


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
