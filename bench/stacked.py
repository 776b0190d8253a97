"""The `stacked` bench section (`bench/run_all.py`, and at the T5-large shape `bench/gpu_checks.py`): a stage of the
grid's 6 λ trained as one stack against the same 6 trained one after another and against one λ alone, side by
side (the three alternate, each repeat; min / median / max), then the step time and peak memory of a stack of
K = 1, 2, 3, 6.

- On a random model of a given shape (`shape_stage`): one task of `steps` optimizer steps on short synthetic examples
  (random tokens), method jumplora+ella with a random W_past (the penalty is on, as in every stage after the first);
  `training.train_task` of the K λ against K = 1 per λ: the training alone, no evaluation.
- On the tiny preset (`tiny_stage`): stage 2 of order 1 as the grid runs it, `continual.run_task_group` (one stack,
  then each λ's after-task and dev evaluation) against a group of one per λ (a one-λ trial: train, merge,
  evaluate), from the same trained first task.
"""

from __future__ import annotations

import random
import resource
import statistics
import time

import torch

from jumplora.config import RunConfig
from jumplora.data.encode import Encoded
from jumplora.methods import make_regulariser
from jumplora.spaces import lambda_grid
from jumplora.training import train_task

KS = (1, 2, 3, 6)


def stats(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "values": values}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synthetic_examples(n: int, source_tokens: int, vocabulary: int, seed: int = 0) -> list[Encoded]:
    """`n` examples of `source_tokens` random tokens (± a quarter) and a one-token answer + EOS (1)."""
    rng = random.Random(seed)
    return [Encoded(tuple(rng.randrange(2, vocabulary) for _ in range(rng.randint(3 * source_tokens // 4,
                                                                                 5 * source_tokens // 4))) + (1,),
                    (rng.randrange(2, vocabulary), 1), "") for _ in range(n)]


class ShapeStage:
    """Task training of λ on `model` (frozen, on `device`); a training leaves the model's start weights."""

    def __init__(self, model, examples: list[Encoded], config: RunConfig, device: torch.device, steps: int) -> None:
        from jumplora.adapters import find_targets, targets

        self.model, self.examples, self.config, self.device, self.steps = model, examples, config, device, steps
        generator = torch.Generator().manual_seed(1)
        self.memory = {name: (0.01 * torch.randn(module.weight.shape, generator=generator)).to(device)
                       for name, module in find_targets(model, targets(config, model)).items()}  # W_past: ELLA on

    def regulariser(self):
        return make_regulariser(self.config, {name: value.clone() for name, value in self.memory.items()})

    def part(self, steps: int | None) -> list[Encoded]:
        return self.examples[: (steps or self.steps) * self.config.batch_size]

    def alone(self, lam: float, steps: int | None = None) -> None:
        """One λ's training of `steps` (default: the stage's) steps."""
        self.stack([lam], steps)

    def stack(self, lams, steps: int | None = None) -> None:
        """The λ of `lams` in one training, `steps` (default: the stage's) steps."""
        train_task(self.model, self.part(steps), task_name="synthetic", task_seed=1, lams=lams,
                   regularisers=[self.regulariser() for _ in lams], config=self.config, pad_id=0, device=self.device,
                   progress=False)
        synchronize(self.device)


def side_by_side(run_stack, run_one, lams, repeats: int) -> dict:
    """Seconds of the stage as one stack, one λ after another, and one λ alone; alternated `repeats` times."""
    times = {"stack": [], "one_by_one": [], "one": []}
    for _ in range(repeats):
        for name, call in (("stack", lambda: run_stack(lams)), ("one_by_one", lambda: [run_one(lam) for lam in lams]),
                           ("one", lambda: run_one(lams[0]))):
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    ratio = [s / o for s, o in zip(times["stack"], times["one_by_one"], strict=True)]
    return {"lams": list(lams), **{name: stats(values) for name, values in times.items()},
            "stack_over_one_by_one": stats(ratio),
            "stack_over_one": stats([s / o for s, o in zip(times["stack"], times["one"], strict=True)])}


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def warm_step(call, steps: int, device: torch.device) -> tuple[float, int | None]:
    """ms of one warm step, (a training of 2N steps − one of N) / N, and the peak device memory of the longer one
    (None on the CPU)."""
    seconds = {}
    for n in (steps, 2 * steps):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        call(n)
        seconds[n] = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return 1e3 * (seconds[2 * steps] - seconds[steps]) / steps, peak


def per_k(stage: ShapeStage, lams, busy: bool = False) -> dict:
    """Per K (and one λ alone, `train_task`): ms of a warm step and the peak memory above the model's: on a GPU
    max_memory_allocated; on the CPU the peak RSS growth, K in ascending order in one process (a later, larger
    stack's peak is above an earlier one's). `busy`: the device's busy share of a warm step from the profiler (as
    `gpu_checks.py`'s loop section: runs of 2N and N steps), for one λ alone and the largest stack."""
    from jumplora.profiling import count_ops

    cuda, n = stage.device.type == "cuda", stage.steps
    base = torch.cuda.memory_allocated(stage.device) if cuda else rss_bytes()
    calls = {"alone": lambda steps: stage.alone(lams[0], steps)}
    calls.update({k: (lambda steps, k=k: stage.stack(lams[:k], steps)) for k in KS})
    result = {}
    for name, call in calls.items():
        ms, peak = warm_step(call, n, stage.device)
        peak = peak if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result[name] = {"ms_per_step": ms, "ms_per_step_per_lambda": ms / (1 if name == "alone" else name),
                        "peak_gib_above_model": (peak - base) / 1024**3}
        if busy and name in ("alone", KS[-1]):
            counts = {steps: count_ops(lambda steps=steps, call=call: call(steps), stage.device)
                      for steps in (n, 2 * n)}
            per_step = counts[2 * n].per_step(counts[n], n)
            result[name]["busy_share"] = per_step.device_busy_s / per_step.wall_s
    return result


def shape_stage(model, device: torch.device, *, batch: int, steps: int, source_tokens: int, repeats: int,
                precision: str = "fp32", busy: bool = False) -> dict:
    """The section on a random model (see the module): `steps` steps of `batch` examples a task."""
    config = RunConfig(method="jumplora+ella", batch_size=batch, precision=precision, device=device.type)
    examples = synthetic_examples(2 * steps * batch, source_tokens, model.config.vocab_size)
    stage = ShapeStage(model, examples, config, device, steps)
    lams = lambda_grid()
    stage.alone(lams[0])  # warm-up: the first training of a process pays one-off costs
    stage.stack(lams)
    return {"batch": batch, "steps": steps, "source_tokens": source_tokens, "precision": precision,
            "stage": side_by_side(stage.stack, stage.alone, lams, repeats), "per_k": per_k(stage, lams, busy)}


def tiny_stage(cache_dir, data_dir, *, train_examples: int, eval_examples: int, repeats: int) -> dict:
    """Stage 2 of order 1 on the tiny preset as the grid runs it (see the module)."""
    from jumplora.continual import ContinualState, prepare, run_continual, run_task_group

    config = RunConfig(order=1, method="jumplora+ella", data_dir=str(data_dir) if data_dir else None, device="cpu",
                       max_tasks=2, max_train_per_task=train_examples, max_eval_per_task=eval_examples)
    ws = prepare(config, cache_dir, progress=False)
    state = run_continual(ws, ContinualState(), progress=False, stop=1, test=False)
    lams = lambda_grid()
    run_task_group(ws, state, 1, lams[:1], progress=False)  # warm-up
    result = side_by_side(lambda group: run_task_group(ws, state, 1, group, progress=False),
                          lambda lam: run_task_group(ws, state, 1, [lam], progress=False), lams, repeats)
    steps = -(-len(ws.encoded[ws.tasks[1]]["train"]) // config.batch_size)
    return {"task": ws.tasks[1], "steps": steps, "batch": config.batch_size,
            "dev_examples": sum(len(ws.encoded[t]["dev"]) for t in ws.tasks), "stage": result}


def lines(name: str, section: dict) -> list[str]:
    """Table rows of one `shape_stage` / `tiny_stage` result."""
    stage = section["stage"]

    def cell(figure: dict, unit: str = "s", fmt: str = "{:.2f}") -> str:
        return " / ".join(fmt.format(figure[key]) for key in ("min", "median", "max")) + f" {unit}"

    out = [f"{name}: a stage of {len(stage['lams'])} λ, {section['steps']} steps × batch {section['batch']}"
           + (f", {section['precision']}" if "precision" in section else ""),
           f"  one stack of {len(stage['lams'])}      {cell(stage['stack'])}",
           f"  {len(stage['lams'])} one after another {cell(stage['one_by_one'])}",
           f"  one λ alone          {cell(stage['one'])}",
           f"  stack / one by one   {cell(stage['stack_over_one_by_one'], '×')}",
           f"  stack / one λ        {cell(stage['stack_over_one'], '×')}"]
    for k, figure in section.get("per_k", {}).items():
        what = "one λ (train_task)" if k == "alone" else f"a stack of K = {k}"
        busy = f", device busy {100 * figure['busy_share']:.0f} %" if figure.get("busy_share") else ""
        out.append(f"  {what}: warm step {figure['ms_per_step']:.0f} ms ({figure['ms_per_step_per_lambda']:.0f} "
                   f"per λ), peak +{figure['peak_gib_above_model']:.2f} GiB{busy}")
    return out
