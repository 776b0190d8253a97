"""Training one task: a fresh adapter (or every weight), one epoch of AdamW on CE + the method's regulariser, then
merge (SPEC §1–§3, §7)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from jumplora.adapters.stacked import SameDraws, StackedAdapter, copies_of
from jumplora.config import MIN_STEPS, STEPS_RULE, RunConfig
from jumplora.data.encode import Encoded, collate, epoch_order, global_batches
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import JumpLoRAError
from jumplora.families import is_causal
from jumplora.losses import stacked_label_ce, summed_label_ce
from jumplora.methods import Regulariser, checked_loss, get_method
from jumplora.precision import autocast, frozen_in_bf16
from jumplora.record import TaskRecord


@dataclass(frozen=True)
class Watch:
    """`callback(step)` right after optimizer step s ∈ `steps` of task `task` (0-based), adapter attached and not
    merged: a λ search's rungs read the model there. The callback must change nothing that training reads (see
    `continual.evaluate_mid_task`), so a watched task trains exactly as an unwatched one."""

    task: int
    steps: frozenset[int]
    callback: Callable[[int], None]


def steps_per_epoch(n_examples: int, batch_size: int) -> int:
    return -(-n_examples // batch_size)


def check_enough_steps(task: str, n_examples: int, batch_size: int) -> None:
    """SPEC §1: a task trains at least `MIN_STEPS` optimizer steps; say how many examples that takes."""
    if steps_per_epoch(n_examples, batch_size) < MIN_STEPS:
        raise JumpLoRAError(
            f"task {task!r} has {n_examples} training examples: {steps_per_epoch(n_examples, batch_size)} step(s) "
            f"at batch {batch_size}; {STEPS_RULE}: at least {(MIN_STEPS - 1) * batch_size + 1} examples are needed "
            f"for {MIN_STEPS} steps (raise --max-train-per-task or lower --batch-size)"
        )


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


def train_task(
    model,
    train: list[Encoded],
    *,
    task_name: str,
    task_seed: int,
    lam: float,
    regulariser: Regulariser | None,
    config: RunConfig,
    pad_id: int,
    device: torch.device,
    shard: Shard = SINGLE,
    progress: bool = True,
    watch: Watch | None = None,
) -> TaskRecord:
    """Train one fresh adapter for one epoch on `train`, merge it into `model`, and return the task's record
    (curves, τ, the merged update on the CPU; its accuracy rows are filled by the loop after evaluation). The loss is
    CE plus `regulariser.loss(adapter, step, lam)` (ELLA's λ·P, EWC's λ·Σ F (θ − θ*)², O-LoRA's terms) when given.

    Every worker of a data-parallel run calls this with the same arguments but its own `shard`: it takes its pieces
    of every global batch, and `shard.sum_gradients` sums the workers' gradients. The loss is the summed label CE
    divided by the *global* batch's label-token count, so the sum over shards is exactly the single-process mean.
    With `config.micro_batches = m` a global batch is cut into `world · m` pieces (piece k: examples k, k + world·m,
    ...) and worker `rank` runs pieces rank, rank + world, ... one after another, accumulating their gradients: one
    worker with m = 2 adds up the same two pieces as two workers with m = 1.

    `watch` (a λ search's rungs): its callback runs after the steps it names; other steps see one set lookup, no
    host synchronisation.
    """
    world = shard.world
    staged, pieces = stage_steps(model, train, task_name, config, pad_id, device, shard)
    bf16 = config.precision == "bf16"

    kind = get_method(config.method).adapter
    torch.manual_seed(task_seed)  # adapter init and dropout masks depend on (seed, task) only: resumable
    adapter = kind.build(model, config, total_steps=len(staged))
    if regulariser is not None:
        regulariser.start_task(adapter)
    params = adapter.trainable_parameters()
    # fused AdamW on CUDA: one kernel for every parameter, its step counters on the device (the default kernel keeps
    # them on the host and reads them); on the CPU the default kernel (the fused CPU one rounds differently)
    optimizer = torch.optim.AdamW(params, lr=kind.lr(config), weight_decay=config.weight_decay,
                                  fused=device.type == "cuda")
    model.train()
    ce_values: list[torch.Tensor] = []
    penalty_values: list[torch.Tensor] = []

    # No host sync in a step: the losses stay on the device until the loop ends (read back once, below), and nothing
    # in the step reads a tensor's value on the host (not τ either), so a GPU is fed without waiting.
    with frozen_in_bf16(model, bf16):  # bf16: the frozen linears cast once for the task, not in every forward
        for step, (my_pieces, n_tokens) in enumerate(tqdm(staged, desc=f"train {task_name}", disable=not progress,
                                                          leave=False), start=1):
            adapter.before_step(step)  # γ for this step
            optimizer.zero_grad(set_to_none=True)
            ce = penalty = torch.zeros((), device=device)
            for batch, weight in my_pieces:  # backward per piece: the gradients add up to this worker's share
                with autocast(device, config.precision):  # bf16 matmuls; ΔW, the mask and τ stay fp32, CE in fp32
                    piece_ce = summed_label_ce(model, batch) * weight / n_tokens  # this piece's share of the mean
                piece_penalty = torch.zeros((), device=device)
                term = regulariser.loss(adapter, step, lam) if regulariser is not None else None
                if step == 1:  # a method plugin's return checked once, where it can be named
                    term = checked_loss(config.method, term)
                if term is not None:
                    # built from this forward's weights; identical in every piece, so each piece counts 1/pieces of it
                    piece_penalty = term / pieces
                (piece_ce + piece_penalty).backward()
                ce, penalty = ce + piece_ce.detach(), penalty + piece_penalty.detach()
            for p in params:  # as the authors' graph (jump branch in it at γ = 0): log τ takes a zero gradient, so
                if p.grad is None:  # AdamW counts every step (step counter, bias correction, moment decay)
                    p.grad = torch.zeros_like(p)
            shard.sum_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()
            adapter.after_step(step)  # sets τ by count right after step S_start
            if watch is not None and step in watch.steps:  # a rung: the model is read, not changed
                watch.callback(step)

            ce_values.append(ce.detach())  # kept on the device: read back once after the loop, not per step
            penalty_values.append(penalty.detach())

    ce = torch.stack(ce_values).cpu().tolist()
    if world > 1:  # each worker logged its share of the global batch's CE
        ce = shard.sum_(torch.tensor(ce, dtype=torch.float64, device=device)).tolist()
    thresholds = adapter.thresholds()
    update = {name: u.cpu() for name, u in adapter.merge().items()}  # W ← W + β ΔW_final; a plain model again
    model.eval()
    penalty = [value * world for value in torch.stack(penalty_values).cpu().tolist()]  # each added 1/world of λ·P
    return TaskRecord(task=task_name, lam=lam, ce=ce, penalty=penalty, thresholds=thresholds,
                      sparsity=TaskRecord.sparsity_of(update), update=update)


def train_stack(
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
    one_by_one: bool | None = None,
) -> tuple[list[TaskRecord], StackedAdapter]:
    """`train_task` for K = len(`lams`) λ at once (`adapters.stacked`): K adapters from the one start each λ has
    alone, each with its regulariser (`regularisers[k]`, its own memory) and λ, its AdamW state (one AdamW over every
    copy's parameters: it acts per tensor, and every copy has the same rate), its clipping by its own norm and its
    loss curve; one forward over K copies of each piece on a GPU, one per copy on a CPU
    (see below; there each copy's backward follows its forward); on a GPU one backward of the sum of the K losses
    (the parameters are disjoint, so each copy's gradient is its own).

    Returns each λ's record, its update kept but not merged, and the stack: the model holds its plain linears with
    their start weights again, and `stack.merge(k)` / `stack.restore()` put λ k's update in and take it out. A λ
    whose ΔW is not finite when τ is set is in `stack.errors`, with its record as trained; `continual.check_diverged`
    judges the others' records as one λ alone's. `one_by_one`: a forward per copy (default: on a CPU, see below)."""
    copies, world = len(lams), shard.world
    # On a GPU one forward over the K copies of each piece: each kernel launch does K times the work, the frozen
    # weights are read once. On a CPU a step is compute-bound and a GEMM adds up in an order set by its shape (its
    # threads split the sums), so one forward per copy on the piece's own rows, with the shapes of its λ alone:
    # bit-equal to it, and no copies of the activations (a stacked batch measured 1.8× slower there).
    one_by_one = device.type != "cuda" if one_by_one is None else one_by_one
    staged, pieces = stage_steps(model, train, task_name, config, pad_id, device, shard)
    if not one_by_one:
        staged = [([({key: copies_of(value, copies) for key, value in batch.items()}, weight)
                    for batch, weight in mine], n_tokens) for mine, n_tokens in staged]
    kind = get_method(config.method).adapter
    torch.manual_seed(task_seed)  # every λ alone's RNG: its adapter's start, its dropout masks (`SameDraws`)
    stack = StackedAdapter(kind, model, config, len(staged), copies)
    views = stack.views()
    for regulariser, view in zip(regularisers, views, strict=True):
        if regulariser is not None:
            regulariser.start_task(view)
    params = stack.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=kind.lr(config), weight_decay=config.weight_decay,
                                  fused=device.type == "cuda")

    def penalty_of(k: int, step: int) -> torch.Tensor:
        """Copy k's λ·P of this forward, 1/pieces of it (as `train_task`)."""
        term = regularisers[k].loss(views[k], step, lams[k]) if regularisers[k] is not None else None
        return term / pieces if term is not None else torch.zeros((), device=device)

    model.train()
    ce_values: list[torch.Tensor] = []
    penalty_values: list[torch.Tensor] = []
    with frozen_in_bf16(model, config.precision == "bf16"):
        for step, (my_pieces, n_tokens) in enumerate(tqdm(staged, desc=f"train {task_name} ×{copies}",
                                                          disable=not progress, leave=False), start=1):
            stack.before_step(step)
            optimizer.zero_grad(set_to_none=True)
            ce = penalty = torch.zeros(copies, device=device)
            for batch, weight in my_pieces:
                if one_by_one:  # copy by copy: its forward, its λ·P, its backward (one copy's graph at a time)
                    piece_ce, piece_penalty = [], []
                    rng = torch.get_rng_state()
                    for k in range(copies):
                        torch.set_rng_state(rng)  # each copy draws the dropout masks its λ alone draws
                        with stack.one(k), autocast(device, config.precision):
                            value = summed_label_ce(model, batch) * weight / n_tokens
                        term = penalty_of(k, step)
                        (value + term).backward()
                        piece_ce.append(value.detach())
                        piece_penalty.append(term.detach())
                else:  # one forward over the K copies, one backward of the sum of the K losses
                    with autocast(device, config.precision), SameDraws(copies):
                        piece_ce = [value * weight / n_tokens for value in stacked_label_ce(model, batch, copies)]
                    piece_penalty = [penalty_of(k, step) for k in range(copies)]
                    sum(c + p for c, p in zip(piece_ce, piece_penalty, strict=True)).backward()
                ce = ce + torch.stack(piece_ce).detach()
                penalty = penalty + torch.stack(piece_penalty).detach()
            for p in params:  # log τ's exact zero gradient at γ = 0, as `train_task`
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            shard.sum_gradients(params)
            for k in range(copies):  # each copy by its own norm, as its λ alone: a non-finite one touches no other
                torch.nn.utils.clip_grad_norm_(stack.copy_parameters(k), config.grad_clip)
            optimizer.step()
            stack.after_step(step)
            ce_values.append(ce)
            penalty_values.append(penalty)

    ce_rows = torch.stack(ce_values).cpu()  # (steps, K), read back once
    if world > 1:  # each worker logged its share of the global batch's CE
        ce_rows = shard.sum_(ce_rows.to(torch.float64).to(device)).cpu()
    penalty_rows = torch.stack(penalty_values).cpu()
    thresholds = stack.thresholds()
    stack.finish()  # the plain linears back, start weights; each copy's β ΔW_final kept
    model.eval()
    records = []
    for k, lam in enumerate(lams):
        update = {name: u.cpu() for name, u in stack.updates[k].items()}
        records.append(TaskRecord(task=task_name, lam=lam, ce=ce_rows[:, k].tolist(),
                                  penalty=[value * world for value in penalty_rows[:, k].tolist()],  # 1/world each
                                  thresholds=thresholds[k],
                                  sparsity=TaskRecord.sparsity_of(update), update=update))
    return records, stack
