"""How fast this machine trains and evaluates a run's model: a few optimizer steps and one evaluation batch, timed
(`grid_lambda.py --calibrate` turns a plan's example counts into hours with it), and what a fresh process pays once
on top (the cold start: on a GPU the CUDA context, cuBLAS and the kernels loaded on first use)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from jumplora.config import RunConfig
from jumplora.continual import prepare, train
from jumplora.distributed import SINGLE
from jumplora.evaluation import exact_match_flags


@dataclass(frozen=True)
class Rates:
    """Seconds per training example and per evaluated example of a warm process, measured on one trial's resources,
    and the seconds a fresh process adds to its first training and evaluation (`cold_start_seconds`)."""

    train_seconds: float
    eval_seconds: float
    device: str
    cold_start_seconds: float = 0.0


def _timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(config: RunConfig, cache_dir: str) -> Rates:
    """Three optimizer steps of the first task (the fewest a task may have) and one evaluation batch, on this
    process's device (a Ray task with one trial's resources: a fresh process). Each is run twice: the second time
    gives the warm rates, the difference the cold start."""
    ws = prepare(dataclasses.replace(config, max_tasks=1), Path(cache_dir), progress=False)
    task = ws.tasks[0]
    part = ws.encoded[task]["train"][: 3 * config.batch_size]
    evaluated = ws.encoded[task]["dev"][: config.eval_batch_size]

    def train_on() -> None:
        train(dataclasses.replace(ws, encoded={task: {"train": part}}), 0, 0.0, None, SINGLE, progress=False)

    def evaluate() -> None:
        exact_match_flags(ws.model, ws.tokenizer, evaluated, batch_size=config.eval_batch_size, device=ws.device,
                          progress=False, mode=config.eval_mode, precision=config.precision)

    cold_train, cold_eval = _timed(train_on), _timed(evaluate)
    warm_train, warm_eval = _timed(train_on), _timed(evaluate)
    return Rates(warm_train / len(part), warm_eval / len(evaluated), str(ws.device),
                 max(0.0, cold_train - warm_train) + max(0.0, cold_eval - warm_eval))
