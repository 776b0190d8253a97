"""What a λ grid costs, counted before anything runs (`grid_lambda.py --dry-run`), and, with `--calibrate`, timed.

Per stage t (1-based) with n_λ trials: n_λ trainings of task t (stage 1: one, plus the single-task runs a0 of tasks
2..T), each ⌈examples / batch⌉ optimizer steps; every trial evaluates the dev sets of tasks 1..t; the test sets of
tasks 1..t are evaluated once, for the chosen trial (every trial with `--test-all-trials`), and the a0 runs evaluate
their own task's test set (`--search halving`'s stages: `Halving.stage_cost`). Source tokens are the encoder
inputs after the prompt, cut at `max_source_tokens`, counted with the model's tokenizer when it is available on this
machine (not for halving stages, whose trainings and rung evaluations stop part-way)."""

from __future__ import annotations

import math
import os
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora import continual, tables
from jumplora.config import RunConfig
from jumplora.data.encode import PromptEncoder, TokenizerFile
from jumplora.steps import steps_per_epoch

if TYPE_CHECKING:  # calibration loads the model side (`continual.prepare`): the driver imports it only to calibrate
    from jumplora.calibration import Rates

SPLITS = ("train", "dev", "test")


@dataclass
class Cost:
    """Work of one stage (or the sum of stages): trainings, examples trained and evaluated, their source tokens."""

    trainings: int = 0
    train_examples: int = 0
    dev_examples: int = 0
    test_examples: int = 0
    train_tokens: int | None = 0  # None: no tokenizer to count with (or a halving stage)
    eval_tokens: int | None = 0
    steps: int = 0  # optimizer steps

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(None if a is None or b is None else a + b
                      for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> list:
        return list(astuple(self))


@dataclass(frozen=True)
class Split:
    examples: int
    tokens: int | None


def tokenizer_of(config: RunConfig, cache_dir: Path):
    """The model's tokenizer from local files (a tiny preset's: its tokenizer alone, no model is built; a folder's
    `tokenizer.json` read without transformers, `TokenizerFile`), or None."""
    from jumplora import tiny

    try:
        if config.model in tiny.PRESETS:
            return tiny.preset_tokenizer(config.model, config.data_dir, cache_dir)
        folder = Path(os.path.expanduser(config.model))
        if (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file():
            return TokenizerFile(folder)
        from transformers import AutoTokenizer  # a hub name: its cached files, by transformers (which loads torch)

        return AutoTokenizer.from_pretrained(os.path.expanduser(config.model), local_files_only=True)
    except (OSError, ValueError):
        return None


def split_sizes(config: RunConfig, tasks: tuple[str, ...], cache_dir: Path) -> dict[str, dict[str, Split]]:
    """task → split → examples and source tokens, as the run will load them (caps, validation, seed)."""
    benchmark = continual.run_benchmark(config, tasks)
    tokenizer = tokenizer_of(config, cache_dir)
    encoder = PromptEncoder(tokenizer, config.max_source_tokens) if tokenizer is not None else None
    sizes = {}
    for task in tasks:
        data = benchmark.tasks[task]
        sizes[task] = {split: Split(len(data.split(split)), None if encoder is None else sum(
            min(encoder.source_length(data.spec, example.text), config.max_source_tokens)
            for example in data.split(split))) for split in SPLITS}
    return sizes


def _sum(values) -> int | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def stage_cost(index: int, n_lambdas: int, baselines: tuple[int, ...], tasks: tuple[str, ...],
               sizes: dict[str, dict[str, Split]], test_all: bool, batch_size: int) -> Cost:
    """The cost of stage `index` (0-based) of the grid: n_λ trials of task `index`, plus the a0 runs of tasks
    `baselines` (a halving search's: `Halving.stage_cost`)."""
    seen = tasks[: index + 1]
    trained = [tasks[index]] * n_lambdas + [tasks[j] for j in baselines]
    dev = [(task, "dev") for task in seen] * n_lambdas
    test = [(task, "test") for task in seen] * (n_lambdas if test_all else 1) + \
        [(tasks[j], "test") for j in baselines]
    return Cost(trainings=len(trained), train_examples=sum(sizes[t]["train"].examples for t in trained),
                dev_examples=sum(sizes[t][s].examples for t, s in dev),
                test_examples=sum(sizes[t][s].examples for t, s in test),
                train_tokens=_sum(sizes[t]["train"].tokens for t in trained),
                eval_tokens=_sum(sizes[t][s].tokens for t, s in dev + test),
                steps=sum(steps_per_epoch(sizes[t]["train"].examples, batch_size) for t in trained))


HEADER = ["stage", "task", "trainings", "train examples", "dev examples", "test examples", "train tokens",
          "eval tokens", "optimizer steps"]


def table(names: list[tuple[str, str]], costs: list[Cost]) -> str:
    """One row per stage and the totals."""
    def cells(cost: Cost) -> list[str]:
        return ["n/a" if v is None else f"{v:,}" for v in cost.values()]

    total = sum(costs, Cost())
    rows = [[stage, task, *cells(cost)] for (stage, task), cost in zip(names, costs, strict=True)]
    return tables.markdown(HEADER, rows + [["total", "", *cells(total)]])


def process_starts(trials: int, workers: int, concurrent: int, test_row: bool) -> int:
    """Fresh worker processes a stage of `trials` trainings starts, each paying the device's cold start once
    (ray_jobs/README.md): min(concurrent, trials) with one worker per trial (Tune reuses a stage's actors), trials × K
    with K workers, plus the chosen trial's test row (`test_row`: a GPU task's worker exits after it, Ray's
    `max_calls` being 1 for GPU tasks)."""
    started = min(concurrent, trials) if workers == 1 else trials * workers
    return started + int(test_row)


def compare_packings(n_lambdas: list[int], baselines: list[int], stage_costs: list[Cost], request, concurrent: int,
                     test_row: bool, rates: Rates | None = None, seeds: int = 1) -> str:
    """Per packing of the stages' λ (`n_lambdas`; their a0 runs `baselines`, one a trial), one λ per trial and each
    stage's in one trial (stacked): trials, worker processes started, device and wall time in trainings (a stack of K
    λ lasts between one training and K: ray_jobs/README.md), the wall time with `concurrent` trials at once; with
    `rates`, the device-hours and wall time of the upper bound (plus a cold start per process) and their worth in
    trainings. With `seeds` (`stage_costs` over all of them), a stage's trials run once per seed, one after another."""
    trainings = sum(cost.trainings for cost in stage_costs)
    lines = [f"the {trainings} trainings, one λ per trial (--lambdas-per-trial 1) or every λ of a stage in one trial "
             "(stacked):"]
    for name, per_trial in (("1", [1] * len(n_lambdas)), ("stacked", n_lambdas)):
        trials = [math.ceil(n / k) + b for n, k, b in zip(n_lambdas, per_trial, baselines, strict=True)]  # a seed's
        starts = [seeds * process_starts(n, request.workers, concurrent, test_row) for n in trials]
        longest = [min(k, n) for k, n in zip(per_trial, n_lambdas, strict=True)]  # λ in a stage's trial
        rounds = [seeds * math.ceil(n / concurrent) for n in trials]
        wall = span(sum(rounds), sum(r * k for r, k in zip(rounds, longest, strict=True)))
        line = (f"  {name}: {seeds * sum(trials)} trials, {sum(starts) + seeds} worker processes started; "
                f"device time {span(seeds * sum(trials), trainings)} trainings, wall {wall} trainings one after "
                "another")
        if rates is not None:
            work = [cost.train_examples * rates.train_seconds + (cost.dev_examples + cost.test_examples) *
                    rates.eval_seconds for cost in stage_costs]
            device = [w + n * rates.cold_start_seconds for w, n in zip(work, starts, strict=True)]
            one = sum(work) / trainings + rates.cold_start_seconds
            wall = sum(d / min(concurrent, n) for d, n in zip(device, trials, strict=True))
            devices = request.workers * (request.gpus or request.cpus)
            line += (f"; calibrated, at most {sum(device) * devices / 3600:.3f} {'GPU' if request.gpus else 'CPU'}-"
                     f"hours (worth {sum(device) / one:.1f} trainings), about {wall / 3600:.3f} h wall")
        lines.append(line)
    return "\n".join(lines)


def span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low} to {high}"


def estimate(total: Cost, rates: Rates, concurrent: int, gpus_per_trial: float, starts: int = 0) -> str:
    """Wall time with `concurrent` trials at once (perfectly packed: a lower bound) and GPU-hours, the `starts`
    cold starts included."""
    cold = starts * rates.cold_start_seconds
    seconds = total.train_examples * rates.train_seconds + \
        (total.dev_examples + total.test_examples) * rates.eval_seconds + cold
    wall = seconds / max(1, concurrent)
    return (f"calibrated on {rates.device}: {1 / rates.train_seconds:.1f} training examples/s, "
            f"{1 / rates.eval_seconds:.1f} evaluated examples/s per trial, cold start "
            f"{rates.cold_start_seconds:.1f} s per fresh process ({starts} of them: {cold / 3600:.2f} h) → "
            f"{seconds / 3600:.2f} trial-hours; "
            f"about {wall / 3600:.2f} h wall with {concurrent} trial(s) at once; "
            f"{seconds * gpus_per_trial / 3600:.2f} GPU-hours")
