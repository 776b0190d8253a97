"""How a run trained and with what software (`describe_runtime`, `provenance`), for `results.json`, its checkpoints
and the MLflow runs' params and tags. Its own module so that the continual loop records it without importing the
tracking package."""

from __future__ import annotations

import contextlib
import functools
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from jumplora.config import RunConfig

PACKAGES = ("torch", "transformers", "peft", "tokenizers", "safetensors", "numpy", "mlflow", "ray")


def git_commit() -> tuple[str, bool] | None:
    """(commit, dirty) of the repository this package lives in; None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if commit.returncode:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def provenance() -> dict:
    """Package versions and the git commit: fixed for the process, so read once (git runs once per process)."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for package in ("jumplora", *PACKAGES):
        with contextlib.suppress(PackageNotFoundError):
            versions[package] = version(package)
    commit = git_commit()
    return {"versions": versions, "git_commit": commit and commit[0], "git_dirty": commit and commit[1]}


def describe_runtime(config: RunConfig, world: int, device: torch.device) -> dict:
    """How a run trained, for `results.json` and its MLflow params: the same config can run on one CPU or on
    several GPUs, and the numbers may differ, so a result must say which."""
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"world_size": world, "global_batch": config.batch_size, "per_worker_batch": config.batch_size // world,
            "micro_batches": config.micro_batches, "device_type": device.type, "device_name": name,
            "threads": torch.get_num_threads(),  # a CPU run's devices for its CPU-hours (`jumplora.cost`)
            "precision": config.precision, **provenance()}
