"""The continual loop: task order → datasets → model + adapter → train one task → merge → evaluate seen tasks.

One loop for every entry point: `jumplora run` calls it in one process; a Ray Train worker calls the same functions
with its `Shard` (data-parallel training and sharded evaluation, see `jumplora.distributed`)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from jumplora import analysis, metrics
from jumplora.adapters import LORA, AdapterKind, targets
from jumplora.adapters.jumplora.model import find_targets, set_submodule
from jumplora.adapters.stacked import STACKED_KINDS
from jumplora.config import RunConfig, check_precision
from jumplora.cost import Cost
from jumplora.cost import summary as cost_summary
from jumplora.data import load_benchmark, order_tasks
from jumplora.data.encode import Encoded, PromptEncoder, collate, normalise_answer
from jumplora.data.types import Benchmark, RowCounts
from jumplora.distributed import SINGLE, Shard
from jumplora.errors import DivergedError, JumpLoRAError, writing
from jumplora.evaluation import exact_match_flags
from jumplora.families import is_causal
from jumplora.lambdas import resolve_lambdas
from jumplora.losses import summed_label_ce
from jumplora.methods import (
    Regulariser,
    TaskContext,
    adapter_kinds,
    check,
    get_method,
    make_regulariser,
    plain_method,
)
from jumplora.models import check_target_modules, load_model
from jumplora.outputs import atomic_write_text
from jumplora.precision import autocast
from jumplora.record import TaskRecord
from jumplora.results import RunResults
from jumplora.runtime import describe_runtime
from jumplora.training import Watch, check_enough_steps, train_stack, train_task

logger = logging.getLogger(__name__)


@dataclass
class Workspace:
    """Everything a run reads before training: data, tokenised splits, the base model."""

    config: RunConfig
    benchmark: Benchmark
    tasks: tuple[str, ...]  # the order's tasks, cut to `config.max_tasks`
    lambdas: list[float]  # λ per task of `tasks`
    model: torch.nn.Module
    tokenizer: object
    encoded: dict[str, dict[str, list[Encoded]]]  # task → split → examples
    device: torch.device


@dataclass
class ContinualState:
    """What the loop has built after some tasks; enough to resume after the last finished task."""

    records: list[TaskRecord] = field(default_factory=list)  # one per finished task, in order (MTL: one in all)
    # what the method remembers of past tasks (ELLA's W_past, EWC's Fisher, O-LoRA's past A), on the training device
    memory: dict[str, torch.Tensor] = field(default_factory=dict)
    runtime: dict | None = None  # how the records were trained (`describe_runtime`); a checkpoint keeps it

    def matrix(self, split: str = "test") -> list[list[float]]:
        """The accuracy rows a[i][j], j ≤ i, of `split` ("test" or "dev")."""
        return [record.test if split == "test" else record.dev for record in self.records]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class DeviceStart(threading.Thread):
    """The one-off start-up of a fresh process on a CUDA device, in the background: the CUDA context, the cuBLAS and
    cuBLASLt handles (a finished thread's handles go back to PyTorch's pool, where the next thread takes them), the
    allocator's first blocks and the kernels of a matmul's forward and backward in the run's precision. `prepare`
    runs it while it reads and tokenises the data, so a Ray worker (every stage of a grid starts new ones) does not
    pay it in its first training step."""

    def __init__(self, device: torch.device, precision: str) -> None:
        super().__init__(name="device-start", daemon=True)
        self.device, self.precision = device, precision
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            x = torch.ones(64, 64, device=self.device, requires_grad=True)  # no random draw: RNG states untouched
            with autocast(self.device, self.precision):
                (x @ x).float().sum().backward()
            torch.cuda.synchronize(self.device)
        except BaseException as error:  # raised again in the caller's thread (`finish`)
            self.error = error

    def finish(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


def run_benchmark(config: RunConfig, tasks: tuple[str, ...]) -> Benchmark:
    """The tasks' data as a run of `config` loads them: its seed, caps and strictness."""
    return load_benchmark(config.data_dir, seed=config.seed, max_train_per_task=config.max_train_per_task,
                          max_eval_per_task=config.max_eval_per_task, strict=config.strict, tasks=tasks)


def prepare(config: RunConfig, cache_dir: Path, progress: bool = True, shard: Shard = SINGLE) -> Workspace:
    """Load and check everything before any training, so that bad input fails fast and writes nothing. The base
    model is loaded by one worker per node first (it may build the node's tiny-preset cache), then by the others.
    On CUDA the device starts up meanwhile (`DeviceStart`)."""
    check(config)  # the method exists and its adapter takes these settings
    device = resolve_device(config.device)
    check_precision(config.precision, device)  # `auto` may have resolved to the CPU
    start = DeviceStart(device, config.precision) if device.type == "cuda" else None
    if start is not None:
        start.start()
    all_tasks = order_tasks(config.data_dir, config.order)
    tasks = all_tasks[: config.max_tasks or len(all_tasks)]
    benchmark = run_benchmark(config, tasks)
    lambdas = resolve_lambdas(config, len(all_tasks))[: len(tasks)]
    for task in tasks:
        check_enough_steps(task, len(benchmark.tasks[task].train), config.batch_size)
    model, tokenizer = shard.in_turn(lambda: load_model(config.model, data_dir=config.data_dir, cache_dir=cache_dir,
                                                        progress=progress, dropout_rate=config.model_dropout))
    check_target_modules(model, targets(config, model))
    model.to(device).requires_grad_(False)
    encoder = PromptEncoder(tokenizer, config.max_source_tokens, config.max_target_tokens, causal=is_causal(model))
    for task in tasks:
        check_room_for_text(encoder, benchmark.tasks[task].spec)
    encoded = {
        task: {split: encoder.encode_all(benchmark.tasks[task].spec, benchmark.tasks[task].split(split))
               for split in ("train", "dev", "test")}
        for task in tasks
    }
    if start is not None:
        start.finish()
    return Workspace(config, benchmark, tasks, lambdas, model, tokenizer, encoded, device)


def check_room_for_text(encoder: PromptEncoder, spec) -> None:
    """The prompt (instruction, options, answer cue) must leave the example text at least one token: otherwise every
    text is cut away and the task is trained on its prompt alone."""
    room = encoder.text_room(spec)
    if room < 1:
        limit = encoder.max_source_tokens
        raise JumpLoRAError(f"task {spec.name!r}: its prompt (instruction + options) takes {limit - room} of the "
                            f"--max-source-tokens {limit} tokens, leaving no room for the text: raise "
                            "--max-source-tokens or shorten the task's instruction or options")


def task_seed(seed: int, task_index: int) -> int:
    return seed * 1000 + task_index


def subset_indices(n: int, limit: int | None, seed: int, task: str, split: str) -> list[int]:
    """Which of the `n` examples of `task`'s `split` an evaluation with `limit` reads: all, or a fixed subset of
    `limit` drawn from its own generator seeded by (run seed, task, split): the same at every rung and for every λ,
    and the global RNG (dropout, adapter initialisation) is not touched."""
    if limit is None or limit >= n:
        return list(range(n))
    return sorted(random.Random(f"subset:{seed}:{task}:{split}").sample(range(n), limit))


def subset(ws: Workspace, task: str, split: str, limit: int | None) -> list[Encoded]:
    """The examples `subset_indices` names."""
    examples = ws.encoded[task][split]
    return [examples[i] for i in subset_indices(len(examples), limit, ws.config.seed, task, split)]


def evaluate(ws: Workspace, tasks: tuple[str, ...], split: str, shard: Shard = SINGLE,
             progress: bool = True, limit: int | None = None) -> list[float]:
    """Accuracy of the current (merged) model on each of `tasks` (on at most `limit` examples of each: `subset`):
    every worker decodes its contiguous slice of a task's examples, then the (correct, seen) counts are summed over
    the workers. With `--authors-compat` the test rows labelled outside the options (dropped by validation, counted in
    `benchmark.test_rows`) are scored as wrong, as the authors' script scores them (SPEC §4,
    `metrics.authors_accuracy`); otherwise they stay out of the count."""
    counts = torch.zeros(len(tasks), 2, dtype=torch.float64)
    sizes = []  # how many examples of each task the workers decode together
    for i, task in enumerate(tasks):
        examples = subset(ws, task, split, limit)
        sizes.append(len(examples))
        start, end = shard.bounds(len(examples))
        mine = examples[start:end]
        flags = exact_match_flags(ws.model, ws.tokenizer, mine, batch_size=ws.config.eval_batch_size,
                                  device=ws.device, desc=f"{split} {task}", progress=progress,
                                  mode=ws.config.eval_mode, precision=ws.config.precision) if mine else []
        counts[i] = torch.tensor([sum(flags), len(flags)], dtype=torch.float64)
    counts = shard.sum_(counts.to(ws.device)).cpu()
    accuracies = []
    for task, size, (correct, seen) in zip(tasks, sizes, counts.tolist(), strict=True):
        assert seen == size, "every example is evaluated exactly once"
        rows = ws.benchmark.test_rows.get(task, RowCounts(int(seen)))
        wrong_rows = rows.unlabelled if split == "test" and ws.config.authors_compat else 0
        accuracies.append(metrics.authors_accuracy(correct, int(seen), rows.labelled, wrong_rows))
    return accuracies


def evaluate_mid_task(ws: Workspace, t: int, limit: int | None, shard: Shard = SINGLE) -> list[float]:
    """Dev accuracy of each seen task (at most `limit` examples of each) in the middle of training t, as the model is
    now: adapter attached, not merged (a λ search's rung, `training.Watch`). It changes nothing training reads: the
    model is put back in training mode (`exact_match_flags`), decoding is greedy, the subset has its own generator,
    and the global RNG state (dropout masks to come) is restored afterwards whatever the model's code draws."""
    devices = [ws.device] if ws.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return evaluate(ws, seen_tasks(ws, t), "dev", shard, progress=False, limit=limit)


def evaluated_examples(ws: Workspace, tasks: tuple[str, ...], split: str, limit: int | None = None) -> int:
    """How many examples `evaluate(ws, tasks, split, limit=limit)` decodes (`subset_indices`: all, or `limit`)."""
    sizes = (len(ws.encoded[task][split]) for task in tasks)
    return sum(size if limit is None else min(size, limit) for size in sizes)


def n_trainings(ws: Workspace) -> int:
    """How many trainings the run has: one per task, or one in all for a joint method (MTL)."""
    return 1 if get_method(ws.config.method).joint else len(ws.tasks)


def seen_tasks(ws: Workspace, t: int) -> tuple[str, ...]:
    """The tasks evaluated after training t: those of the order so far (MTL: all of them)."""
    return ws.tasks if get_method(ws.config.method).joint else ws.tasks[: t + 1]


def training_examples(ws: Workspace, t: int) -> tuple[str, list[Encoded]]:
    """Training t's name and examples: task t of the order's; for a joint method (MTL) "mtl" and the union of the
    order's tasks."""
    if get_method(ws.config.method).joint:
        return "mtl", [example for task in ws.tasks for example in ws.encoded[task]["train"]]
    return ws.tasks[t], ws.encoded[ws.tasks[t]]["train"]


def train(ws: Workspace, t: int, lam: float, regulariser: Regulariser | None, shard: Shard,
          progress: bool, watch: Watch | None = None) -> TaskRecord:
    """Training t on top of the current weights, then merged: task t of the order with a fresh adapter for one
    epoch; for a joint method (MTL) one adapter for one epoch over the union of the order's tasks, shuffled."""
    name, examples = training_examples(ws, t)
    mine = watch if watch is not None and watch.task == t else None
    record = train_task(ws.model, examples, task_name=name, task_seed=task_seed(ws.config.seed, t), lam=lam,
                        regulariser=regulariser, config=ws.config, pad_id=ws.tokenizer.pad_token_id, device=ws.device,
                        shard=shard, progress=progress, watch=mine)
    check_diverged(record, ws.config, t)
    return record


# the settings that make a training diverge, per symptom, most likely first
LOSS_SETTINGS = ("lr", "full_lr", "alpha", "bandwidth", "lambdas")
TAU_SETTINGS = ("bandwidth", "lr", "alpha")


def check_diverged(record: TaskRecord, config: RunConfig, t: int) -> None:
    """Stop at a diverged training, once per task after its step loop (the step loop never syncs with the host): the
    first step whose loss CE + λ·P is not finite, else a τ or a merged update that is not, or an update that is zero
    everywhere (no step moved the adapter), with the likely setting: those of the symptom's settings that differ
    from the defaults (else the first one), with their values."""
    losses = [ce + penalty for ce, penalty in zip(record.ce, record.penalty, strict=True)]
    step = next((s for s, value in enumerate(losses, start=1) if not math.isfinite(value)), None)
    taus = [group for group, tau in record.thresholds.items() if not math.isfinite(tau)]
    update = record.update or {}
    updates = [name for name, values in update.items() if not torch.isfinite(values).all()]
    # every step's gradient norm was infinite, so clipping scaled every step to zero: nothing was learned
    unmoved = bool(update) and all(values.count_nonzero() == 0 for values in update.values())
    if step is None and not taus and not updates and not unmoved:
        return
    if step is not None:
        penalty_first = math.isfinite(record.ce[step - 1])
        part = f"λ·P = {record.penalty[step - 1]}" if penalty_first else f"CE = {record.ce[step - 1]}"
        what = f"the loss is not finite from step {step} of {len(losses)} on ({part})"
        settings = ("lambdas",) if penalty_first else LOSS_SETTINGS
    elif taus:
        what = f"τ of {taus[0]} is {record.thresholds[taus[0]]} after the last step"
        settings = TAU_SETTINGS
    elif updates:
        what = f"the merged update of {updates[0]} is not finite"
        settings = LOSS_SETTINGS
    else:
        what = f"no step of {len(losses)} moved the adapter (its gradients were not finite, so clipping zeroed them)"
        settings = LOSS_SETTINGS
    raise DivergedError(f"training diverged in task {t + 1} ({record.task}): {what}; likely setting: "
                        f"{likely_settings(config, settings, record.lam)}: bring it towards its default and run "
                        "again (nothing after this task was trained, no results.json was written)")


def likely_settings(config: RunConfig, names: tuple[str, ...], lam: float) -> str:
    """`--name value (default d)` of the named settings the user changed, or of the first one when none was."""
    defaults = RunConfig()

    def text(name: str) -> str:
        if name == "lambdas":
            return f"--lambdas (λ = {lam:g} in this task)"
        return f"--{name.replace('_', '-')} {getattr(config, name):g} (default {getattr(defaults, name):g})"

    # the learning rate that trained: --full-lr when every weight trains (EWC, SeqFT), else --lr
    trained_lr = "full_lr" if get_method(config.method).adapter.whole_model else "lr"
    relevant = [name for name in names if name not in ("lr", "full_lr") or name == trained_lr]
    changed = [name for name in relevant if name != "lambdas" and getattr(config, name) != getattr(defaults, name)]
    if "lambdas" in relevant and lam > 0 and config.lambdas != defaults.lambdas:
        changed.append("lambdas")
    return " or ".join(text(name) for name in changed or relevant[:1])


def run_task(ws: Workspace, state: ContinualState, t: int, shard: Shard = SINGLE, progress: bool = True,
             test: bool = True, watch: Watch | None = None) -> None:
    """Train task t on top of the merged model, merge, let the method remember it, evaluate the seen tasks and append
    the task's record. With `test` False only the dev sets are evaluated (a λ-grid trial: selection reads dev; the
    chosen trial's test row is filled in afterwards by `evaluate_test_row`). `watch`: see `training.Watch`. The record
    keeps the task's wall seconds, timed around the whole (the evaluation reads its counts back to the host, so device
    work is included)."""
    started = time.monotonic()
    regulariser = make_regulariser(ws.config, state.memory)
    record = train(ws, t, ws.lambdas[t], regulariser, shard, progress, watch)
    if regulariser is not None:  # e.g. W_past += β ΔW_final, EWC's Fisher of task t
        regulariser.after_task(task_context(ws, t, record, shard))
    seen = seen_tasks(ws, t)
    record.dev = evaluate(ws, seen, "dev", shard, progress)
    record.seconds += time.monotonic() - started
    state.records.append(record)
    if test:
        evaluate_test_row(ws, state, shard, progress)


def stacks(method: str) -> bool:
    """Whether `run_task_group` trains this method's λ as one stack (adapter methods with a per-task λ), rather than
    one by one (whole-model methods such as EWC)."""
    spec = get_method(method)
    return spec.per_task_lambda and not spec.joint and spec.adapter in STACKED_KINDS


def run_task_group(ws: Workspace, state: ContinualState, t: int, lams: Sequence[float], shard: Shard = SINGLE,
                   progress: bool = True) -> list[ContinualState | DivergedError]:
    """Train task t once per λ in `lams`, every one from the same start (`ws.model` as it is, and `state`), as the
    λ would train alone in `run_task(ws, state, t, test=False)` with `ws.lambdas[t] = λ`: for each λ, in the order
    of `lams`, a new ContinualState = a copy of `state` (records list copied, memory tensors cloned) with that λ's
    TaskRecord appended (its `lam`, curves, thresholds, update, dev row filled, `test` empty as run_task(test=False)
    leaves it, its own seconds: its share of the training plus its own evaluation) and its memory after the method's
    after_task; or the DivergedError that λ alone raises (same message), for that λ only: the others go on. On
    return `ws.model` holds the start weights again (bitwise), and `ws.lambdas` is as it was. A method whose adapter
    kind is `whole_model` (EWC) or with no per-task λ trains its λ one by one inside this function, as does a group
    of one λ (today's `run_task`); adapter methods train them as one stack (`training.train_stack`: one forward over
    K copies of each batch), equal to one by one up to the order of float operations."""
    if len(lams) == 1 or not stacks(ws.config.method):
        return [run_alone(ws, state, t, lam, shard, progress) for lam in lams]
    started = time.monotonic()
    memories = [{name: value.clone() for name, value in state.memory.items()} for _ in lams]
    regularisers = [make_regulariser(ws.config, memory) for memory in memories]
    name, examples = training_examples(ws, t)
    records, stack = train_stack(ws.model, examples, task_name=name, task_seed=task_seed(ws.config.seed, t),
                                 lams=lams, regularisers=regularisers, config=ws.config,
                                 pad_id=ws.tokenizer.pad_token_id, device=ws.device, shard=shard, progress=progress)
    share = (time.monotonic() - started) / len(lams)  # each λ's part of the one training
    outcomes: list[ContinualState | DivergedError] = []
    for k, (record, regulariser) in enumerate(zip(records, regularisers, strict=True)):
        started = time.monotonic()
        try:
            if k in stack.errors:
                raise stack.errors[k]
            check_diverged(record, ws.config, t)
        except DivergedError as error:
            outcomes.append(error)
            continue
        stack.merge(k)
        try:
            if regulariser is not None:
                regulariser.after_task(task_context(ws, t, record, shard))
            record.dev = evaluate(ws, seen_tasks(ws, t), "dev", shard, progress)
        finally:
            stack.restore()
        record.seconds = share + time.monotonic() - started
        outcomes.append(ContinualState(records=[*state.records, record], memory=memories[k],
                                       runtime=copy.deepcopy(state.runtime)))
    return outcomes


def run_alone(ws: Workspace, state: ContinualState, t: int, lam: float, shard: Shard = SINGLE,
              progress: bool = True) -> ContinualState | DivergedError:
    """`run_task(test=False)` of task t with λ = `lam` on a copy of `state`; afterwards the model's start weights and
    `ws.lambdas` are put back. Its DivergedError is returned, not raised."""
    start = {name: value.clone() for name, value in ws.model.state_dict().items()}
    linears = find_targets(ws.model, targets(ws.config, ws.model))
    kept, ws.lambdas[t] = ws.lambdas[t], lam
    mine = copy.deepcopy(state)
    try:
        run_task(ws, mine, t, shard, progress, test=False)
        return mine
    except DivergedError as error:
        return error
    finally:
        ws.lambdas[t] = kept
        for name, linear in linears.items():  # a training stopped before its merge leaves its adapter on
            set_submodule(ws.model, name, linear)
        if hasattr(ws.model, "peft_config"):
            del ws.model.peft_config
        ws.model.load_state_dict(start)


def task_context(ws: Workspace, t: int, record: TaskRecord, shard: Shard) -> TaskContext:
    """What the method's regulariser reads after training t (`methods.TaskContext`): the methods see examples only
    through `nll`, never the data package."""
    causal, pad_id = is_causal(ws.model), ws.tokenizer.pad_token_id
    name, examples = training_examples(ws, t)

    def nll(example: Encoded) -> torch.Tensor:  # −log p(label | source): the summed label CE of the one example
        return summed_label_ce(ws.model, collate([example], pad_id, ws.device, causal))

    return TaskContext(model=ws.model, task=name, examples=examples, nll=nll, update=record.update, device=ws.device,
                       shard=shard)


def evaluate_test_row(ws: Workspace, state: ContinualState, shard: Shard = SINGLE, progress: bool = True) -> None:
    """The test accuracies a[t][j], j ≤ t, of the last finished task t, with the current (merged) model; the time it
    takes is added to the task's seconds."""
    record, done = state.records[-1], len(state.records)
    started = time.monotonic()
    record.test = evaluate(ws, seen_tasks(ws, done - 1), "test", shard, progress)
    record.seconds += time.monotonic() - started
    logger.info("training %d/%d %s: test accuracy on seen tasks %s", done, n_trainings(ws), record.task,
                " ".join(f"{a:.3f}" for a in record.test))


def run_continual(ws: Workspace, state: ContinualState | None = None, shard: Shard = SINGLE, progress: bool = True,
                  stop: int | None = None, test: bool = True,
                  on_task: Callable[[Workspace, ContinualState, int], None] | None = None,
                  watch: Watch | None = None) -> ContinualState:
    """For each task in order, from the first one not in `state` (a resumed run) up to `stop` (default: all):
    train, merge, evaluate (the test sets too unless `test` is False); then `on_task(ws, state, t)` (tracking,
    a checkpoint). `watch`: callbacks in the middle of one task's training (`training.Watch`)."""
    state = state or ContinualState()
    todo = range(len(state.records), n_trainings(ws) if stop is None else min(stop, n_trainings(ws)))
    if todo:  # a resumed run that trains nothing keeps the runtime its checkpoint recorded
        state.runtime = describe_runtime(ws.config, shard.world, ws.device)
    for t in todo:
        run_task(ws, state, t, shard, progress, test, watch)
        if on_task is not None:
            on_task(ws, state, t)
    return state


# a0 (SPEC §4) of each adapter kind is trained as the method that trains it alone trains it (`plain_method`): the
# run's own kind for `fwt`, plain LoRA, shared by every method, for `fwt_last_row`.
SHARED_ADAPTER = LORA
NOT_IN_A0_KEY = ("order", "lambdas", "single_task_baselines", "max_tasks")


def single_task_config(config: RunConfig, adapter: AdapterKind | None = None) -> RunConfig:
    """The configuration of an a0 run of `adapter` (default: the run's own kind): the method that trains it alone
    (without settings of its own), the fields of the other adapter kinds at their defaults. Its digest
    (`single_task_key`) is the same for every method with that adapter, so a sweep or a cache trains each task alone
    once per seed and kind."""
    adapter = adapter or get_method(config.method).adapter
    defaults = RunConfig()
    unused = {name for kind in adapter_kinds() if kind != adapter for name in kind.fields}
    unused -= set(adapter.fields)
    return dataclasses.replace(config, method=plain_method(adapter).name, single_task_baselines=False, settings=None,
                               **{name: getattr(defaults, name) for name in sorted(unused)})


def single_task_key(config: RunConfig) -> str:
    """What decides an a0 of `config` (an a0 configuration), except the task, its seed and the data: the digest of the
    configuration without the order, λ or the task limit."""
    return config.digest(exclude=NOT_IN_A0_KEY)


def single_task_accuracy(ws: Workspace, t: int, shard: Shard = SINGLE, progress: bool = True) -> TaskRecord:
    """a0[t] (SPEC §4): the adapter of `ws.config` trained on task t alone (λ = 0) from the weights of `ws.model`,
    which must be the base model; the model is changed (merged). Returns the training's record, its test accuracy
    (`record.test`, one value: a0[t]) and its seconds filled in."""
    started = time.monotonic()
    record = train(ws, t, 0.0, None, shard, progress)
    record.test = evaluate(ws, ws.tasks[t : t + 1], "test", shard, progress)
    record.seconds = time.monotonic() - started
    return record


def single_task_accuracies(ws: Workspace, base_state: dict[str, torch.Tensor], cache_dir: Path,
                           progress: bool = True, adapter: AdapterKind | None = None,
                           cost: Cost | None = None) -> list[float]:
    """a0 of every task of the order with `adapter` (default: the run's own kind; `single_task_config`), each on a
    copy of the base model (`base_state`), cached per task; the trainings it runs (not the cached ones) are added to
    `cost`.

    The cache key holds what decides the number: the a0 configuration (not the order, λ or the task limit; not the
    method, only its adapter kind), the base model's build, the data fingerprint, the task's seed, which depends on the
    task's position in the order (so orders that put the task elsewhere never share an a0), and, when the rows
    labelled outside the options are scored as wrong (`--authors-compat`), how many the task has."""
    config = single_task_config(ws.config, adapter)
    ws = dataclasses.replace(ws, config=config)
    base_model = Path(str(getattr(ws.model, "name_or_path", ""))).name  # tiny-<fingerprint> for the tiny preset
    config_key = f"{single_task_key(config)}:{base_model}"  # the same for every task
    results = []
    for t, task in enumerate(tqdm(ws.tasks, desc="single-task baselines", disable=not progress, leave=False)):
        seed = task_seed(config.seed, t)
        unlabelled = ws.benchmark.test_rows.get(task, RowCounts(0)).unlabelled if config.authors_compat else 0
        parts = config_key + (f":unlabelled{unlabelled}" if unlabelled else "")
        key = hashlib.sha256(parts.encode()).hexdigest()[:16]
        path = cache_dir / "single_task" / f"{task}-taskseed{seed}-{key}-{ws.benchmark.fingerprint[:16]}.json"
        if path.exists():
            results.append(json.loads(path.read_text())["accuracy"])
            continue
        model = copy.deepcopy(ws.model)
        model.load_state_dict(base_state)
        record = single_task_accuracy(dataclasses.replace(ws, model=model), t, progress=progress)
        if cost is not None:
            cost.add(record)
        with writing(path.parent):
            path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"task": task, "task_seed": seed, "base_model": base_model,
                                            "accuracy": record.test[0], "config": config.to_dict()}))
        results.append(record.test[0])
    return results


@dataclass
class SingleTaskBaselines:
    """a0 of every task of the order (SPEC §4): `own`, trained with the run's adapter kind (SPEC's FWT), and `shared`,
    plain LoRA, the same for every method (FWT last row, as the authors' script and the paper's column); `cost`: the
    single-task trainings this run ran (cached a0 cost it nothing)."""

    own: list[float]
    shared: list[float] | None  # None: not trained (a λ grid of a JumpLoRA or EWC method: `ray_jobs.grid`)
    cost: Cost = field(default_factory=Cost)


def single_task_baselines(ws: Workspace, base_state: dict[str, torch.Tensor], cache_dir: Path,
                          progress: bool = True) -> SingleTaskBaselines:
    """Both a0 rows of the run (`single_task_accuracies`); for a method of plain LoRA they are the same row."""
    cost = Cost()
    own = single_task_accuracies(ws, base_state, cache_dir, progress, cost=cost)
    if get_method(ws.config.method).adapter is SHARED_ADAPTER:
        return SingleTaskBaselines(own, list(own), cost)
    shared = single_task_accuracies(ws, base_state, cache_dir, progress, adapter=SHARED_ADAPTER, cost=cost)
    return SingleTaskBaselines(own, shared, cost)


def summarise(ws: Workspace, state: ContinualState, baselines: SingleTaskBaselines | None) -> RunResults:
    """The `results.json` payload (`RunResults`): config, matrices, OA/BWT/FWT and FWT last row (percent, SPEC §4;
    FWT against the run's own kind of a0, FWT last row against the shared plain-LoRA a0), both a0 rows, how the test
    rows labelled outside the options were scored, sparsity, overlap, thresholds, λ, how the tasks were trained
    (`runtime`) and what the run cost (`jumplora.cost`)."""
    size = len(ws.tasks)
    joint = get_method(ws.config.method).joint  # MTL: one row, after the one training; no BWT or FWT (None)
    a0 = baselines.own if baselines is not None else None
    shared_a0 = baselines.shared if baselines is not None else None
    counts = {task: ws.benchmark.test_rows.get(task, RowCounts(len(ws.encoded[task]["test"]))) for task in ws.tasks}
    padded = [row + [None] * (size - len(row)) for row in state.matrix("test")]
    dev_padded = [row + [None] * (size - len(row)) for row in state.matrix("dev")]
    updates = [record.update for record in state.records]
    return RunResults(
        order=ws.config.order,
        tasks=list(ws.tasks),
        method=ws.config.method,
        config=ws.config.to_dict(),
        seed=ws.config.seed,
        data_fingerprint=ws.benchmark.fingerprint,
        accuracy_matrix=padded,
        dev_accuracy_matrix=dev_padded,
        single_task_accuracy=a0,  # the run's own adapter kind, trained on each task alone: FWT's a0
        single_task_accuracy_shared=shared_a0,  # plain LoRA, the same for every method: FWT last row's a0
        # test rows labelled outside the options: scored as wrong with --authors-compat (the authors' scoring), else
        # dropped; the labelled rows (before caps) let a report rescale a dropped run to the authors' scoring
        unlabelled_test={"scoring": "wrong" if ws.config.authors_compat else "dropped",
                         "rows": {task: c.unlabelled for task, c in counts.items()},
                         "labelled_rows": {task: c.labelled for task, c in counts.items()}},
        majority_baseline=[metrics.majority_baseline([normalise_answer(e.label) for e in ws.encoded[t]["test"]])
                           for t in ws.tasks],
        oa=100.0 * sum(padded[0]) / size if joint else metrics.overall_accuracy(padded),
        bwt=None if joint else metrics.backward_transfer(padded),
        fwt=metrics.forward_transfer(padded, a0) if a0 is not None and not joint else None,
        fwt_last_row=metrics.forward_transfer_last_row(padded, shared_a0) if shared_a0 is not None and not joint
        else None,
        sparsity=[record.sparsity for record in state.records],
        jaccard={
            "matrix": analysis.jaccard_matrix(updates),
            "middle_block": analysis.middle_block(list(updates[0])),
            "mean_with_earlier_middle_block": analysis.overlap_with_earlier(updates),
        },
        thresholds=[record.thresholds for record in state.records],
        lambdas=ws.lambdas,
        loss_curves={"ce": [record.ce for record in state.records],
                     "penalty": [record.penalty for record in state.records]},
        runtime=state.runtime,
        cost=cost_summary(state.records, state.runtime, baselines.cost if baselines is not None else None),
    )
