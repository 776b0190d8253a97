"""GPU checks (shared/GPU_CHECKS.md): JumpReLU numerics, training steps and evaluation on CUDA; a table and JSON.

Sections (`--sections`, all by default); repeated figures are min / median / max:
- numerics: `symmetric_jump`'s output, ΔW-gradient and τ-gradient on the device against the CPU on the same tensors:
  random rank-8 ΔW = B A of adapted shapes (A Kaiming-uniform as at init, B ~ N(0, 0.05²), about what B reaches in
  training), ε = 1e-3, τ by count as at S_start (r·(d_in + d_out) entries kept) and τ at the median |ΔW| (a large
  share of the entries inside the kernel band ||ΔW| − τ| < ε/2); in fp32, under bf16 autocast, and with ΔW itself
  built under bf16 autocast (what JumpLoraLinear avoids by building ΔW with autocast off). Then a JumpLoraLinear
  (1024 × 1024, γ = 1, τ by count) forward + backward on the device, fp32 and under bf16 autocast, against fp32 on
  the CPU. Relative difference: max |device − cpu| / max |cpu| for a tensor, |device − cpu| / |cpu| for a scalar;
  "flips": entries kept (|ΔW| > τ) on one side only.
- step: one optimizer step of JumpLoRA (global τ by count, γ = 1, no dropout) and PEFT LoRA (dropout 0), set up as
  `bench/run_all.py`'s Stepper sets them up and stepped as `train_task` steps (summed label CE over the global
  batch's label tokens, one backward per micro-batch, clip, AdamW), in fp32 and under bf16 autocast, on a T5-base
  shape (batch 8 × 128) and a T5-large shape (batch 32 × 512; micro-batches double from `--large-micro-batches`
  while a step runs out of device memory). The two adapters step alternately after warm-up steps; wall time with
  the device synchronised; the ratio is taken per pair; peak device memory (max_memory_allocated) of one step with
  the other model moved to the CPU.
- eval: `exact_match_flags` fast vs generate (wall time, identical flags, examples the fast route hands to generate)
  on the synthetic benchmark's order-1 test sets, encoded with the tiny preset's tokenizer: a T5-large shape with
  random weights (vocabulary cut to the tokenizer's), and the tiny preset after training order 1's first task with
  `train_task` on the device, in fp32 and in bf16.

- loop: `train_task` as a run calls it, on a random T5-large-shaped model (`--loop-shape`; vocabulary cut to the tiny
  preset's tokenizer) with order 1's first task encoded by that tokenizer (the synthetic benchmark's lengths, about
  105 source tokens; `--loop-source-tokens` cuts them), `--loop-batch` examples a step, in fp32 and bf16. Per
  precision: cold ms/step (the first `train_task` of the process at that precision, N steps), warm ms/step (a run of
  2N steps minus one of N, `--loop-steps` N), and per step, from the profiler over runs of 2N and N steps
  (`jumplora.profiling`): aten ops (on a GPU most launch a kernel), kernel launches, device busy share, host syncs
  (aten::item, aten::_local_scalar_dense, aten::nonzero, aten::is_nonzero; apart: those of the optimizer's host-held
  step counters, and those outside the model's forward; the profiler shows one `.item()` as two or three events,
  so `HostSyncs` counts each read once too), dtype-cast copies (aten::_to_copy events, nested ones included),
  copies made from the frozen weights (`WeightCasts`) and device → host copies. Then fast and generate evaluation
  throughput on `--loop-eval` test examples at that precision, and their flags compared. With `--device cpu` bf16
  runs under CPU autocast (`train_task` follows its device; the run itself refuses bf16 off CUDA).

- stacked: a stage of the grid's 6 λ in one training (`training.train_task` of K λ) against the same 6 one by one
  (`train_task`) and one λ alone, side by side, then per K = 1, 2, 3, 6 (and one λ alone) a warm step's time and
  peak device memory, and the profiler's device busy share of a warm step for one λ alone and the stack of 6
  (`bench/stacked.py`): jumplora+ella with a random W_past on a random model of `--stacked-shape` (T5-large), built
  on the device, `--stacked-steps` steps of `--stacked-batch` synthetic examples of about `--stacked-len` tokens,
  fp32 and bf16. Needs no tiny preset and no data: only torch, transformers and peft beside this repository.

    PYTHONPATH=. python bench/gpu_checks.py [--sections numerics,step,eval,loop,stacked] [--repeats 7] [--out gpu.json]

`--device cpu` runs the script on a machine without a GPU (a smoke run: its figures compare the CPU with itself).
Not a test and not part of `make bench`. Status: the numerics, step and eval sections ran on an H200 once
(shared/GPU_CHECKS.md); the loop and stacked sections have run on the CPU only.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import platform
import statistics
import time
from pathlib import Path

import peft
import stacked
import torch
import transformers
from run_all import GIB, ROOT, T5_BASE, T5_LARGE, Stepper, random_batch, random_t5, row, stats
from torch import nn

from jumplora.adapters.jumplora import JumpLoraLinear, ThresholdGroup
from jumplora.losses import summed_label_ce
from jumplora.ops import symmetric_jump, threshold_for_count
from jumplora.profiling import HostSyncs, WeightCasts, count_ops, forward_marked

SECTIONS = ("numerics", "step", "eval", "loop", "stacked")
SHAPES = {"t5-base": T5_BASE, "t5-large": T5_LARGE}
EPS = 1e-3
RANK, ALPHA, B_STD = 8, 32.0, 0.05
DELTA_SHAPES = ((768, 768), (1024, 1024), (4096, 1024))  # (d_out, d_in): T5-base q/v, T5-large q/v, a d_ff layer
LAYER_TOKENS = (8, 128)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rel(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value − reference| / max |reference| (for scalars |value − reference| / |reference|), in float64."""
    value, reference = value.detach().double().cpu(), reference.detach().double().cpu()
    return float((value - reference).abs().max() / reference.abs().max())


def flips(kept: torch.Tensor, reference: torch.Tensor) -> int:
    return int((kept.cpu() != reference.cpu()).sum())


# ------------------------------------------------------------------------------------------------------- numerics


def jump_on(device: torch.device, delta: torch.Tensor, tau: torch.Tensor, grad_out: torch.Tensor,
            autocast: bool = False) -> dict[str, torch.Tensor]:
    """symmetric_jump's output, ΔW-gradient and τ-gradient on `device`, from copies of the given tensors."""
    delta = delta.detach().to(device).requires_grad_(True)
    threshold = tau.detach().to(device).requires_grad_(True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        out = symmetric_jump(delta, threshold, EPS)
    out.backward(grad_out.to(device, out.dtype))
    return {"out": out.detach(), "delta_grad": delta.grad, "tau_grad": threshold.grad, "kept": out.detach() != 0}


def compare_jump(result: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
    return {"out_rel": rel(result["out"], reference["out"]),
            "delta_grad_rel": rel(result["delta_grad"], reference["delta_grad"]),
            "tau_grad_rel": rel(result["tau_grad"], reference["tau_grad"]),
            "flips": flips(result["kept"], reference["kept"])}


def jump_cases(device: torch.device, seeds: int) -> list[dict]:
    cpu = torch.device("cpu")
    cases = []
    for d_out, d_in in DELTA_SHAPES:
        for seed in range(seeds):
            generator = torch.Generator().manual_seed(seed)
            a = (torch.rand(RANK, d_in, generator=generator) * 2 - 1) / d_in**0.5  # Kaiming-uniform(a=√5) bound
            b = torch.randn(d_out, RANK, generator=generator) * B_STD
            delta = b @ a
            grad_out = torch.randn(d_out, d_in, generator=generator)
            by_count = threshold_for_count(delta.abs(), RANK * (d_in + d_out)).float()
            for tau_kind, tau in (("by count", by_count), ("median", delta.abs().median())):
                reference = jump_on(cpu, delta, tau, grad_out)
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    delta_bf16 = b.to(device) @ a.to(device)
                cases.append({
                    "shape": [d_out, d_in], "seed": seed, "tau": tau_kind, "tau_value": float(tau),
                    "in_band": int(((delta.abs() - tau).abs() < EPS / 2).sum()),
                    "kept": int(reference["kept"].sum()),
                    "fp32": compare_jump(jump_on(device, delta, tau, grad_out), reference),
                    "autocast": compare_jump(jump_on(device, delta, tau, grad_out, autocast=True), reference),
                    "delta_in_bf16": compare_jump(jump_on(device, delta_bf16, tau, grad_out), reference),
                })
    return cases


def jump_layer(d_out: int, d_in: int, seed: int) -> JumpLoraLinear:
    """A JumpLoraLinear on the CPU with random B, γ = 1 and τ by count over its own ΔW."""
    torch.manual_seed(seed)
    group = ThresholdGroup(1, torch.device("cpu"))
    layer = JumpLoraLinear(nn.Linear(d_in, d_out, bias=False).requires_grad_(False), RANK, ALPHA / RANK, group, EPS,
                           "mean", 0.0, copies=1)
    with torch.no_grad():
        layer.lora_B[0].normal_(0.0, B_STD)
        group.log_tau[0].fill_(math.log(float(threshold_for_count(layer.delta(0).abs(), RANK * (d_in + d_out)))))
    group.initialized, group.gamma = True, 1.0
    return layer


def layer_on(device: torch.device, layer: JumpLoraLinear, x: torch.Tensor, grad_y: torch.Tensor,
             autocast: bool) -> dict[str, torch.Tensor]:
    layer = copy.deepcopy(layer).to(device)
    layer.group.to(device)  # shared by the group's layers, so not a child module
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        y = layer(x.to(device))
    (y.float() * grad_y.to(device)).sum().backward()
    return {"y": y.detach(), "A_grad": layer.lora_A[0].grad, "B_grad": layer.lora_B[0].grad,
            "log_tau_grad": layer.group.log_tau[0].grad, "kept": layer.hard_mask(layer.last_delta[0], 0)}


def layer_cases(device: torch.device, seeds: int) -> list[dict]:
    cases = []
    for seed in range(seeds):
        layer = jump_layer(1024, 1024, seed)
        generator = torch.Generator().manual_seed(100 + seed)
        x = torch.randn(*LAYER_TOKENS, 1024, generator=generator)
        grad_y = torch.randn(*LAYER_TOKENS, 1024, generator=generator)
        reference = layer_on(torch.device("cpu"), layer, x, grad_y, autocast=False)
        case = {"seed": seed, "tau_value": float(layer.group.tau(0).detach())}
        for name, autocast in (("fp32", False), ("autocast", True)):
            result = layer_on(device, layer, x, grad_y, autocast)
            case[name] = {f"{key}_rel": rel(result[key], reference[key]) for key in ("y", "A_grad", "B_grad",
                                                                                    "log_tau_grad")}
            case[name]["flips"] = flips(result["kept"], reference["kept"])
        cases.append(case)
    return cases


def section_numerics(args, device: torch.device) -> dict:
    jump, layer = jump_cases(device, args.seeds), layer_cases(device, args.seeds)
    worst = {f"jump {variant}": {key: max(case[variant][key] for case in jump) for key in jump[0][variant]}
             for variant in ("fp32", "autocast", "delta_in_bf16")}
    worst |= {f"layer {variant}": {key: max(case[variant][key] for case in layer) for key in layer[0][variant]}
              for variant in ("fp32", "autocast")}
    return {"jump_cases": jump, "layer_cases": layer, "worst": worst,
            "in_band": {"min": min(c["in_band"] for c in jump), "max": max(c["in_band"] for c in jump)}}


# ----------------------------------------------------------------------------------------------------------- step


class DeviceStepper(Stepper):
    """Stepper's adapter set-up (a dense warm-up step, τ by count, then γ = 1), stepped as `train_task` steps."""

    def __init__(self, kind: str, model, batch: dict[str, torch.Tensor], device: torch.device) -> None:
        self.device, self.micro_batches, self.bf16 = device, 1, False
        super().__init__(kind, model.to(device), {key: value[:1] for key, value in batch.items()})  # warm-up: 1 ex.
        self.batch = batch

    def step(self) -> float:
        """Wall seconds of one optimizer step over `self.batch` in `self.micro_batches` pieces, device synchronised."""
        synchronize(self.device)
        start = time.perf_counter()
        n_tokens = self.batch["labels"].numel()  # random labels: no padding
        for piece in range(self.micro_batches):
            micro = {key: value[piece :: self.micro_batches] for key, value in self.batch.items()}
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                ce = summed_label_ce(self.model, micro) / n_tokens
            ce.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        return time.perf_counter() - start


def warm_up(steppers: dict[str, DeviceStepper], bf16: bool, micro_batches: int, steps: int) -> bool:
    """Set precision and micro-batches, take the warm-up steps; False if one ran out of device memory."""
    try:
        for stepper in steppers.values():
            stepper.bf16, stepper.micro_batches = bf16, micro_batches
            for _ in range(steps):
                stepper.step()
    except torch.OutOfMemoryError:
        for stepper in steppers.values():
            stepper.optimizer.zero_grad(set_to_none=True)
        return False
    return True


def peak_alone(stepper: DeviceStepper, others: list[DeviceStepper]) -> float | None:
    """Peak device memory (GiB) of one step with the other steppers' models on the CPU; None off CUDA."""
    if stepper.device.type != "cuda":
        return None
    for other in others:
        other.model.to("cpu")
    torch.cuda.reset_peak_memory_stats(stepper.device)
    stepper.step()
    peak = torch.cuda.max_memory_allocated(stepper.device) / GIB
    for other in others:
        other.model.to(stepper.device)
    return peak


def step_shape(args, device: torch.device, shape: str) -> dict:
    batch_size, length, first_micro = ((args.base_batch, args.base_len, 1) if shape == "t5-base"
                                       else (args.large_batch, args.large_len, args.large_micro_batches))
    batch = {key: value.to(device) for key, value in random_batch(batch_size, length).items()}
    model = random_t5(SHAPES[shape])
    steppers = {"lora": DeviceStepper("lora", copy.deepcopy(model), batch, device),
                "jumplora": DeviceStepper("jumplora", model, batch, device)}
    adapter = steppers["jumplora"].adapter
    result = {"batch": [batch_size, length], "tau": adapter.thresholds()[0]["global"],
              "gamma": adapter.groups["global"].gamma,
              "parameters_gib": sum(p.numel() * p.element_size() for p in steppers["lora"].model.parameters()) / GIB}
    for precision in ("fp32", "bf16"):
        micro = first_micro
        while not warm_up(steppers, precision == "bf16", micro, args.warmup):
            if micro >= batch_size:
                raise RuntimeError(f"{shape} {precision}: out of device memory even at one example per micro-batch")
            torch.cuda.empty_cache()
            micro *= 2
        times = {kind: [] for kind in steppers}
        for _ in range(args.repeats):  # alternate, so both see the same state of the device
            for kind, stepper in steppers.items():
                times[kind].append(stepper.step())
        result[precision] = {
            "micro_batches": micro, "lora_s": stats(times["lora"]), "jumplora_s": stats(times["jumplora"]),
            "ratio": stats([j / lo for j, lo in zip(times["jumplora"], times["lora"], strict=True)]),
            "peak_gib": {kind: peak_alone(stepper, [s for s in steppers.values() if s is not stepper])
                         for kind, stepper in steppers.items()},
        }
    return result


def section_step(args, device: torch.device) -> dict:
    return {shape: step_shape(args, device, shape) for shape in args.shapes.split(",")}


# ----------------------------------------------------------------------------------------------------------- eval


def timed_flags(model, tokenizer, encoded: list, device: torch.device, batch_size: int, repeats: int) -> dict:
    """Both modes `repeats` times (after one untimed pass of each): times, identical flags, accuracy, hand-overs."""
    import jumplora.evaluation as evaluation

    real = evaluation._teacher_forced_verdicts
    handed = []

    def counting(*a, **k):
        verdicts = real(*a, **k)
        handed.append(sum(v is None for v in verdicts))
        return verdicts

    times, flags = {"fast": [], "generate": []}, {}
    try:
        evaluation._teacher_forced_verdicts = counting
        for timed in [False] + [True] * repeats:
            for mode in ("fast", "generate"):
                handed.clear()
                synchronize(device)
                start = time.perf_counter()
                flags[mode] = evaluation.exact_match_flags(model, tokenizer, encoded, batch_size=batch_size,
                                                           device=device, progress=False, mode=mode)
                synchronize(device)
                if timed:
                    times[mode].append(time.perf_counter() - start)
                if mode == "fast":
                    handed_to_generate = sum(handed)
    finally:
        evaluation._teacher_forced_verdicts = real
    return {"examples": len(encoded), "fast_s": stats(times["fast"]), "generate_s": stats(times["generate"]),
            "speedup": stats([g / f for f, g in zip(times["fast"], times["generate"], strict=True)]),
            "identical_flags": flags["fast"] == flags["generate"], "handed_to_generate": handed_to_generate,
            "accuracy": {mode: sum(f) / len(f) for mode, f in flags.items()}}


def section_eval(args, device: torch.device) -> dict:
    from jumplora.config import RunConfig
    from jumplora.continual import prepare
    from jumplora.training import train_task

    config = RunConfig(order=1, method="jumplora+inclora", device=device.type,
                       max_train_per_task=args.task_train, max_eval_per_task=args.eval_per_task)
    ws = prepare(config, args.cache_dir, progress=False)
    tests = [example for task in ws.tasks for example in ws.encoded[task]["test"]]
    lengths = [len(e.input_ids) for e in tests]
    runs = {}
    large = random_t5(T5_LARGE)
    large.resize_token_embeddings(len(ws.tokenizer))
    runs["t5-large random"] = timed_flags(large.to(device).eval(), ws.tokenizer, tests, device,
                                          config.eval_batch_size, args.eval_repeats)
    del large  # off the device before the tiny preset trains

    initial = {key: value.detach().clone() for key, value in ws.model.state_dict().items()}
    first = ws.tasks[0]
    for precision in ("fp32", "bf16") if device.type == "cuda" else ("fp32",):
        ws.model.load_state_dict(initial)
        trained = dataclasses.replace(config, precision=precision)
        synchronize(device)
        start = time.perf_counter()
        done = train_task(ws.model, ws.encoded[first]["train"], task_name=first, task_seed=0, lams=[0.0],
                          regularisers=[None], config=trained, pad_id=ws.tokenizer.pad_token_id, device=ws.device,
                          progress=False)
        done.adapter.merge(0)
        log = done.record(0)
        synchronize(device)
        runs[f"tiny trained {precision}"] = {
            "task": first, "train_examples": len(ws.encoded[first]["train"]), "train_s": time.perf_counter() - start,
            "final_ce": log.ce[-1], "tau": log.thresholds,
            **timed_flags(ws.model, ws.tokenizer, tests, device, config.eval_batch_size, args.eval_repeats),
        }
    return {"tasks": list(ws.tasks), "runs": runs,
            "source_tokens": {"min": min(lengths), "median": statistics.median(lengths), "max": max(lengths)}}


# ----------------------------------------------------------------------------------------------------------- loop


def loop_workspace(args, device: torch.device):
    """The tiny preset's workspace on `device` (order 1, the first task's examples) and the random model of
    `--loop-shape` with its vocabulary cut to the tiny tokenizer's, on `device`."""
    from jumplora.config import RunConfig
    from jumplora.continual import prepare

    config = RunConfig(order=1, method=args.loop_method, device=device.type, batch_size=args.loop_batch,
                       max_train_per_task=max(2 * args.loop_steps * args.loop_batch, 3 * args.loop_batch),
                       max_eval_per_task=args.loop_eval, max_tasks=1, eval_batch_size=args.loop_batch)
    ws = prepare(config, args.cache_dir, progress=False)
    model = random_t5(SHAPES[args.loop_shape])
    model.resize_token_embeddings(len(ws.tokenizer))
    model.to(device).requires_grad_(False)
    cut = args.loop_source_tokens
    examples = {split: [dataclasses.replace(e, input_ids=e.input_ids[-cut:] if cut else e.input_ids)
                        for e in ws.encoded[ws.tasks[0]][split]] for split in ("train", "test")}
    return ws, model, examples


def loop_precision(args, device: torch.device, ws, model, examples: dict, precision: str) -> dict:
    """Cold and warm ms/step, the profiler's per-step counts and evaluation throughput, at `precision`."""
    from jumplora.adapters import find_targets
    from jumplora.evaluation import exact_match_flags
    from jumplora.training import train_task

    config = dataclasses.replace(ws.config, precision=precision, device="auto")  # bf16 on the CPU: CPU autocast
    # only the adapted weights change (the merge): keep those, not a second copy of the model
    initial = {name: module.weight.detach().clone() for name, module in find_targets(model, ("q", "v")).items()}
    frozen = list(model.parameters())
    n = args.loop_steps

    def restore() -> None:
        with torch.no_grad():
            for name, module in find_targets(model, ("q", "v")).items():
                module.weight.copy_(initial[name])

    def run(steps: int):
        def call():
            train_task(model, examples["train"][: steps * args.loop_batch], task_name=ws.tasks[0], task_seed=0,
                       lams=[0.0], regularisers=[None], config=config, pad_id=ws.tokenizer.pad_token_id,
                       device=device, progress=False).adapter.merge(0)
            synchronize(device)
        return call

    def timed(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        run(steps)()
        seconds = time.perf_counter() - start
        restore()
        return seconds

    cold = warm_n = warm_2n = float("nan")
    if not args.loop_counts_only:
        cold = timed(n)
        warm_n, warm_2n = timed(n), timed(2 * n)
    counts = {}
    for steps in (n, 2 * n):
        with forward_marked(model), WeightCasts(frozen) as casts, HostSyncs(model) as reads:
            counts[steps] = (count_ops(run(steps), device), casts.count, reads)
        restore()
    per_step = counts[2 * n][0].per_step(counts[n][0], n)
    result = {"cold_ms_per_step": 1e3 * cold / n, "warm_ms_per_step": 1e3 * (warm_2n - warm_n) / n,
              "warm_n_s": warm_n, "warm_2n_s": warm_2n, "per_step": dataclasses.asdict(per_step),
              "host_reads_per_step": {place: (getattr(counts[2 * n][2], place) - getattr(counts[n][2], place)) / n
                                      for place in ("forward", "loop", "optimizer")},
              "frozen_weight_copies_per_step": (counts[2 * n][1] - counts[n][1]) / n,
              "frozen_weight_copies_per_task": counts[n][1] - (counts[2 * n][1] - counts[n][1]),
              "device_busy_share": per_step.device_busy_s / per_step.wall_s if device.type == "cuda" else None}
    if args.loop_counts_only:
        return result
    model.eval()
    test = examples["test"]
    flags, rates = {}, {}
    for mode in ("fast", "generate"):
        for timed_pass in (False, True):  # one untimed pass of each first
            synchronize(device)
            start = time.perf_counter()
            flags[mode] = exact_match_flags(model, ws.tokenizer, test, batch_size=args.loop_batch, device=device,
                                            progress=False, mode=mode, precision=precision)
            synchronize(device)
            if timed_pass:
                rates[mode] = len(test) / (time.perf_counter() - start)
    result["eval"] = {"examples": len(test), "fast_per_s": rates["fast"], "generate_per_s": rates["generate"],
                      "speedup": rates["fast"] / rates["generate"],
                      "identical_flags": flags["fast"] == flags["generate"]}
    model.train()
    return result


def section_loop(args, device: torch.device) -> dict:
    ws, model, examples = loop_workspace(args, device)
    lengths = [len(e.input_ids) for e in examples["train"]]
    result = {"shape": args.loop_shape, "method": args.loop_method, "batch": args.loop_batch, "steps": args.loop_steps,
              "source_tokens": {"min": min(lengths), "median": statistics.median(lengths), "max": max(lengths)}}
    for precision in args.loop_precisions.split(","):
        result[precision] = loop_precision(args, device, ws, model, examples, precision)
    return result


def section_stacked(args, device: torch.device) -> dict:
    with torch.device(device):  # built on the device: a T5-large initialised on the host takes a minute
        model = random_t5(SHAPES[args.stacked_shape])
    result = {"shape": args.stacked_shape}
    for precision in args.stacked_precisions.split(","):
        result[precision] = stacked.shape_stage(model, device, batch=args.stacked_batch, steps=args.stacked_steps,
                                                source_tokens=args.stacked_len, repeats=args.stacked_repeats,
                                                precision=precision, busy=device.type == "cuda")
        print(f"[gpu_checks] stacked {precision} done", flush=True)
    return result


RUNNERS = {"numerics": section_numerics, "step": section_step, "eval": section_eval, "loop": section_loop,
           "stacked": section_stacked}


# --------------------------------------------------------------------------------------------------------- report


def value_row(name: str, value, unit: str = "", fmt: str = "{:.3g}") -> str:
    return f"{name:<52} {fmt.format(value):>32}  {unit}"


def loop_lines(precision: str, p: dict) -> list[str]:
    ops, evaluation = p["per_step"], p.get("eval")
    busy = "n/a" if p["device_busy_share"] is None else f"{100 * p['device_busy_share']:.0f} %"
    lines = [f"  {precision}: cold {p['cold_ms_per_step']:.0f} ms/step, warm {p['warm_ms_per_step']:.0f} ms/step; "
             f"device busy {busy}",
             f"  {precision} per step: {ops['aten_ops']:.0f} aten ops, {ops['launches']:.0f} kernel launches, "
             f"{ops['syncs']:.1f} host syncs ({ops['syncs_outside_forward']:.1f} outside the forward; "
             f"{ops['optimizer_counter_reads']:.1f} more on the optimizer's host counters), {ops['casts']:.1f} casts, "
             f"{p['frozen_weight_copies_per_step']:.1f} copies of frozen weights "
             f"({p['frozen_weight_copies_per_task']:.0f} per task), {ops['device_to_host']:.1f} device → host",
             f"  {precision} host reads per step, each once (HostSyncs): " + ", ".join(
                 f"{place} {value:.1f}" for place, value in p["host_reads_per_step"].items())]
    if evaluation:
        lines.append(f"  {precision} eval ({evaluation['examples']} ex.): fast {evaluation['fast_per_s']:.1f}/s, "
                     f"generate {evaluation['generate_per_s']:.1f}/s ({evaluation['speedup']:.2f}×), identical flags "
                     f"{evaluation['identical_flags']}")
    return lines


def report(results: dict) -> str:
    lines = [f"device: {results['device']}; torch {results['torch']}, transformers {results['transformers']}, "
             f"peft {results['peft']}; fp32 matmul precision {results['fp32_matmul']}; section wall times "
             + ", ".join(f"{name} {wall:.0f} s" for name, wall in results["wall_s"].items())]
    numerics, step, evaluation, loop, stack = (results["sections"].get(name) for name in SECTIONS)
    if numerics:
        band = numerics["in_band"]
        lines.append(f"numerics: worst over {len(numerics['jump_cases'])} symmetric_jump cases ({band['min']}-"
                     f"{band['max']} entries in the kernel band) and {len(numerics['layer_cases'])} layer cases")
        for variant, worst in numerics["worst"].items():
            lines.append(f"  {variant}: " + ", ".join(f"{key} {value:.3g}" if isinstance(value, float)
                                                      else f"{key} {value}" for key, value in worst.items()))
    for shape, figures in (step or {}).items():
        b = "×".join(map(str, figures["batch"]))
        lines.append(f"{shape} step, batch {b} (parameters {figures['parameters_gib']:.2f} GiB), "
                     f"τ {figures['tau']:.3g}, γ {figures['gamma']}")
        lines.append(f"{'figure':<52} {'min':>10} {'median':>10} {'max':>10}")
        for precision in ("fp32", "bf16"):
            p = figures[precision]
            peak = p["peak_gib"]
            lines += [row(f"  {precision}, {p['micro_batches']} micro-batch(es): PEFT LoRA", p["lora_s"], "s"),
                      row(f"  {precision}: JumpLoRA γ=1", p["jumplora_s"], "s"),
                      row(f"  {precision}: JumpLoRA / LoRA (per pair)", p["ratio"], "×", fmt="{:.3f}")]
            if peak["lora"] is not None:
                lines.append(f"  {precision}: peak memory, one step alone: LoRA {peak['lora']:.2f} GiB, "
                             f"JumpLoRA {peak['jumplora']:.2f} GiB")
    if evaluation:
        lines.append(f"eval: order-1 test sets {', '.join(evaluation['tasks'])}, source tokens "
                     f"{evaluation['source_tokens']}")
        for name, figures in evaluation["runs"].items():
            lines += [row(f"  {name}: fast ({figures['examples']} ex.)", figures["fast_s"], "s"),
                      row(f"  {name}: generate", figures["generate_s"], "s"),
                      row(f"  {name}: generate / fast", figures["speedup"], "×", fmt="{:.2f}"),
                      f"  {name}: identical flags {figures['identical_flags']}, accuracy {figures['accuracy']}, "
                      f"{figures['handed_to_generate']} handed to generate by fast"]
            if "train_s" in figures:
                lines.append(value_row(f"  {name}: train {figures['task']} ({figures['train_examples']} ex.)",
                                       figures["train_s"], "s", "{:.2f}"))
    if loop:
        lines.append(f"loop: train_task on a random {loop['shape']} ({loop['method']}), batch {loop['batch']}, "
                     f"source tokens {loop['source_tokens']}, N = {loop['steps']} steps; per step: a run of 2N minus "
                     "one of N")
        for precision in ("fp32", "bf16"):
            if precision in loop:
                lines += loop_lines(precision, loop[precision])
    for precision, section in (stack or {}).items():
        if precision != "shape":
            lines += stacked.lines(f"stacked, {stack['shape']}", section)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "gpu.json")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke run of the script")
    parser.add_argument("--seeds", type=int, default=2, help="random ΔW / layers per shape (numerics)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"step shapes, a subset of {tuple(SHAPES)}")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per adapter and precision")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per adapter before each precision")
    parser.add_argument("--base-batch", type=int, default=8)
    parser.add_argument("--base-len", type=int, default=128)
    parser.add_argument("--large-batch", type=int, default=32)
    parser.add_argument("--large-len", type=int, default=512)
    parser.add_argument("--large-micro-batches", type=int, default=1, help="first micro-batch count tried")
    parser.add_argument("--eval-per-task", type=int, default=100, help="test examples a task (4 tasks)")
    parser.add_argument("--eval-repeats", type=int, default=3)
    parser.add_argument("--task-train", type=int, default=None, help="cap on the trained task's examples")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "cache", help="tiny preset cache")
    parser.add_argument("--loop-shape", default="t5-large", choices=tuple(SHAPES))
    parser.add_argument("--loop-method", default="jumplora+ella")
    parser.add_argument("--loop-batch", type=int, default=32, help="examples a step (and an evaluation batch)")
    parser.add_argument("--loop-steps", type=int, default=8, help="N: runs of N and 2N steps (N ≥ 3)")
    parser.add_argument("--loop-source-tokens", type=int, default=None, help="keep the last N source tokens")
    parser.add_argument("--loop-eval", type=int, default=64, help="test examples evaluated (≤ per class cap)")
    parser.add_argument("--loop-precisions", default="fp32,bf16")
    parser.add_argument("--loop-counts-only", action="store_true",
                        help="the loop's per-step counts only: no timed runs, no evaluation (a slow CPU)")
    parser.add_argument("--stacked-shape", default="t5-large", choices=tuple(SHAPES))
    parser.add_argument("--stacked-batch", type=int, default=32, help="examples a step of each λ")
    parser.add_argument("--stacked-len", type=int, default=105, help="source tokens of an example (± a quarter)")
    parser.add_argument("--stacked-steps", type=int, default=3, help="N: steps of a training; warm steps from 2N − N")
    parser.add_argument("--stacked-repeats", type=int, default=3, help="the stage's three ways, alternated")
    parser.add_argument("--stacked-precisions", default="fp32,bf16")
    args = parser.parse_args()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if set(sections) - set(SECTIONS):
        parser.error(f"unknown section(s) in {args.sections!r}; choose from {', '.join(SECTIONS)}")
    if set(args.shapes.split(",")) - set(SHAPES):
        parser.error(f"unknown shape(s) in {args.shapes!r}; choose from {', '.join(SHAPES)}")
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})"
    results = {"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
               "peft": peft.__version__, "fp32_matmul": torch.get_float32_matmul_precision(), "sections": {},
               "wall_s": {}}
    for section in sections:
        start = time.perf_counter()
        results["sections"][section] = RUNNERS[section](args, device)
        results["wall_s"][section] = time.perf_counter() - start
        print(f"[gpu_checks] {section} done in {results['wall_s'][section]:.0f} s", flush=True)
    text = report(results)
    results["table"] = text
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(text)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
