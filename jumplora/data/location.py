"""Where a run's data is, when the command line does not say: the one rule of `--data-dir` for `jumplora run` and
the Ray scripts, so that a run meant for the paper's numbers never trains on the synthetic stand-in by accident."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from jumplora.config import SYNTHETIC, RunConfig
from jumplora.errors import JumpLoRAError

DEFAULT_CACHE = "~/.cache/jumplora"  # every command's --cache-dir: every run, job and worker of a node shares one
DEFAULT_DATA_DIR = f"{DEFAULT_CACHE}/CL_Benchmark"  # where `jumplora data build` writes by default
DATA_DIR_ENV = "JUMPLORA_DATA_DIR"
TINY_PRESETS = ("tiny", "tiny-causal")  # the offline presets (`jumplora.tiny.PRESETS`), named here without model code


def resolve_data_dir(given: str | None, *, synthetic_default: bool) -> str | None:
    """The CL_Benchmark directory to read, or None for the synthetic benchmark.

    `given` (`--data-dir`) wins: `synthetic`, or a directory (checked by the loader). Otherwise a run with
    `synthetic_default` uses the synthetic benchmark, whatever the machine holds; any other run takes
    `$JUMPLORA_DATA_DIR` (as if given), else the default location if it holds a `tasks.json`, else stops here."""
    if given is not None:
        return None if given == SYNTHETIC else given
    if synthetic_default:
        return None
    if os.environ.get(DATA_DIR_ENV):
        return os.environ[DATA_DIR_ENV]
    default = Path(DEFAULT_DATA_DIR).expanduser()
    if (default / "tasks.json").is_file():
        return str(default)
    raise JumpLoRAError(f"no CL_Benchmark data at {DEFAULT_DATA_DIR}: build it there with `jumplora data build`, or "
                        f"pass --data-dir DIR or set {DATA_DIR_ENV} (--data-dir {SYNTHETIC}: the synthetic benchmark)")


def with_data_located(config: RunConfig) -> RunConfig:
    """`config` with `data_dir` by the rule of `resolve_data_dir`: a tiny preset runs on the synthetic benchmark
    unless a directory is given; any other model needs the real data (a model trained for the paper's numbers on the
    synthetic stand-in would be a wasted run). Loads no model code: a refusal comes before any."""
    return dataclasses.replace(config, data_dir=resolve_data_dir(config.data_dir,
                                                                 synthetic_default=config.model in TINY_PRESETS))
