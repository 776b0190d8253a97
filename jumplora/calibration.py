"""How fast this machine trains and evaluates a run's model: a few optimizer steps and one evaluation batch, timed
(`grid_lambda.py --calibrate` turns a plan's example counts into hours with it)."""

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
    """Seconds per training example and per evaluated example, measured on one trial's resources."""

    train_seconds: float
    eval_seconds: float
    device: str


def measure(config: RunConfig, cache_dir: str) -> Rates:
    """Three optimizer steps of the first task (the fewest a task may have) and one evaluation batch, on this
    process's device (a Ray task with one trial's resources). The same steps run once untimed first (warm-up)."""
    ws = prepare(dataclasses.replace(config, max_tasks=1), Path(cache_dir), progress=False)
    task = ws.tasks[0]
    part = ws.encoded[task]["train"][: 3 * config.batch_size]

    def train_on() -> None:
        train(dataclasses.replace(ws, encoded={task: {"train": part}}), 0, 0.0, None, SINGLE, progress=False)

    train_on()
    started = time.perf_counter()
    train_on()
    train_seconds = (time.perf_counter() - started) / len(part)
    evaluated = ws.encoded[task]["dev"][: config.eval_batch_size]
    started = time.perf_counter()
    exact_match_flags(ws.model, ws.tokenizer, evaluated, batch_size=config.eval_batch_size, device=ws.device,
                      progress=False, mode=config.eval_mode)
    return Rates(train_seconds, (time.perf_counter() - started) / len(evaluated), str(ws.device))
