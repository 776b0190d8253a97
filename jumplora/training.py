"""Training one task: K ≥ 1 copies of a fresh adapter (or every weight), one per λ, one epoch of AdamW on CE + each
λ's regulariser; each copy's update kept to be merged (SPEC §1–§3, §7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from jumplora.adapters import AdapterCopies
from jumplora.config import RunConfig
from jumplora.data.encode import Encoded, collate, epoch_order, global_batches
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import DivergedError
from jumplora.families import is_causal
from jumplora.methods import Regulariser, get_method
from jumplora.precision import frozen_in_bf16
from jumplora.record import TaskRecord
from jumplora.step_modes import CopyByCopy, OneForward, StepMode, Terms
from jumplora.steps import Watch

Staged = list[tuple[list[tuple[dict[str, torch.Tensor], float]], int]]


def stage_steps(model, train: list[Encoded], task_name: str, config: RunConfig, pad_id: int, device: torch.device,
                shard: Shard) -> tuple[Staged, int]:
    """Every step's pieces of this worker, collated on the device before the first step, each with its CE weight, and
    the step's global batch's label-token count (a piece's CE is divided by it: the workers' sum is the single-process
    mean); and how many pieces a global batch is cut into, `world · config.micro_batches`: piece k of batch `idx` is
    idx[k::pieces], worker `rank` runs pieces rank, rank + world, ... (docs/DECISIONS.md, "Micro-batches"; an empty
    piece of a short last batch runs on the batch's first example with weight 0: "Last partial batch"). Enough steps
    for SPEC §1 were checked with the data (`continual.prepare`: `steps.check_enough_steps`)."""
    batches = global_batches(epoch_order(len(train), config.seed, task_name), config.batch_size)
    pieces = shard.world * config.micro_batches
    causal = is_causal(model)

    def mine(idx: list[int]) -> list[tuple[dict[str, torch.Tensor], float]]:  # this worker's pieces of a batch
        return [(collate([train[i] for i in idx[k::pieces] or idx[:1]], pad_id, device, causal),
                 1.0 if idx[k::pieces] else 0.0) for k in range(shard.rank, pieces, shard.world)]

    return [(mine(idx), sum(len(train[i].label_ids) for i in idx)) for idx in batches], pieces


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


def train_task(model, train: list[Encoded], *, task_name: str, task_seed: int, lams: Sequence[float],
               regularisers: Sequence[Regulariser | None], config: RunConfig, pad_id: int, device: torch.device,
               shard: Shard = SINGLE, progress: bool = True, watch: Watch | None = None,
               one_forward: bool | None = None) -> Trained:
    """Train K = len(`lams`) fresh copies of the method's adapter for one epoch on `train`, copy k for λ k with its
    regulariser `regularisers[k]` (its own memory). Each λ trains as it would alone (K = 1): the same start, its own
    AdamW state, clipping norm and curves; copy by copy (the CPU's default) or in one forward over K copies (the GPU's;
    `one_forward` chooses). A copy whose ΔW is not finite when τ is set stops alone (its outcome is that
    DivergedError), and training when all have. A data-parallel worker trains on its pieces of every batch
    (`stage_steps`; `shard.sum_gradients`). `watch` (a λ search's rungs, K = 1): its callback runs after its steps."""
    copies = len(lams)
    staged, pieces = stage_steps(model, train, task_name, config, pad_id, device, shard)
    kind = get_method(config.method).adapter
    torch.manual_seed(task_seed)  # adapter init and dropout masks depend on (seed, task) only: resumable
    adapter = kind.build(model, config, total_steps=len(staged), copies=copies)
    terms = Terms(adapter, regularisers, lams, config.method, pieces, device)
    stacked = copies > 1 and (device.type == "cuda" if one_forward is None else one_forward)  # one copy: either mode
    mode: StepMode = (OneForward if stacked else CopyByCopy)(terms, config.precision)  # chosen once
    staged = [([(mode.stage(batch), weight) for batch, weight in mine], n_tokens) for mine, n_tokens in staged]
    for regulariser, view in zip(regularisers, terms.views, strict=True):
        if regulariser is not None:
            regulariser.start_task(view)
    params = [p for k in range(copies) for p in adapter.trainable_parameters(k)]
    # fused AdamW on CUDA: one kernel for every parameter, its step counters on the device (the default kernel keeps
    # them on the host and reads them); on the CPU the default kernel (the fused CPU one rounds differently)
    optimizer = torch.optim.AdamW(params, lr=kind.lr(config), weight_decay=config.weight_decay,
                                  fused=device.type == "cuda")
    model.train()
    losses: list[tuple[torch.Tensor, torch.Tensor]] = []  # each step's (K,) CE and λ·P
    # No host sync in a step: the losses stay on the device until the loop ends (read back once, `outcomes`), and
    # nothing in the step reads a tensor's value on the host (not τ either), so a GPU is fed without waiting.
    try:
        with frozen_in_bf16(model, config.precision == "bf16"):  # bf16: the frozen linears cast once for the task
            desc = f"train {task_name}" + (f" ×{copies}" if copies > 1 else "")
            for step, (my_pieces, n_tokens) in enumerate(tqdm(staged, desc=desc, disable=not progress, leave=False),
                                                         start=1):
                adapter.before_step(step)  # γ for this step
                optimizer.zero_grad(set_to_none=True)
                ce = penalty = torch.zeros(copies, device=device)
                for batch, weight in my_pieces:  # backward per piece: the gradients add up to this worker's share
                    piece_ce, piece_penalty = mode.losses(batch, weight, n_tokens, step)
                    ce, penalty = ce + piece_ce, penalty + piece_penalty
                for p in params:  # as the authors' graph (jump branch in it at γ = 0): log τ takes a zero gradient,
                    if p.grad is None:  # so AdamW counts every step (step counter, bias correction, moment decay)
                        p.grad = torch.zeros_like(p)
                shard.sum_gradients(params)
                for k in range(copies):  # each copy by its own norm, as its λ alone: a non-finite one touches no other
                    torch.nn.utils.clip_grad_norm_(adapter.trainable_parameters(k), config.grad_clip)
                optimizer.step()
                losses.append((ce, penalty))
                adapter.after_step(step)  # sets τ by count right after step S_start
                if len(adapter.errors) == copies:
                    break
                if watch is not None and step in watch.steps:  # a rung: the model is read, not changed
                    watch.callback(step)
    finally:  # however the loop ends, the model is plain again
        updates = adapter.finish()
        model.eval()
    return Trained(outcomes(adapter, updates, losses, task_name, lams, shard, device), adapter)


def outcomes(adapter: AdapterCopies, updates: list[dict[str, torch.Tensor]],
             losses: list[tuple[torch.Tensor, torch.Tensor]], task_name: str, lams: Sequence[float],
             shard: Shard, device: torch.device) -> list[TaskRecord | DivergedError]:
    """Each λ's outcome of `train_task`: the DivergedError it stopped with, or its record, its update on the CPU and
    its curves read back once (CE summed over the workers, each of which logged its share of the global batch's)."""
    ce_values, penalty_values = zip(*losses, strict=True)
    ce_rows = torch.stack(ce_values).cpu()  # (steps, K)
    if shard.world > 1:
        ce_rows = shard.sum_(ce_rows.to(torch.float64).to(device)).cpu()
    penalty_rows = torch.stack(penalty_values).cpu()
    thresholds = adapter.thresholds()
    found: list[TaskRecord | DivergedError] = []
    for k, lam in enumerate(lams):
        update = {name: u.cpu() for name, u in updates[k].items()}
        found.append(adapter.errors.get(k) or TaskRecord(
            task=task_name, lam=lam, ce=ce_rows[:, k].tolist(), thresholds=thresholds[k], update=update,
            penalty=[value * shard.world for value in penalty_rows[:, k].tolist()],  # each worker added 1/world
            sparsity=TaskRecord.sparsity_of(update)))
    return found
