"""A checkpoint after a finished task: everything needed to go on with the next task as if never interrupted.

Files: one `taskNN.safetensors` per finished task (its merged update β·ΔW_final per adapted module, sparse ones
compact), `w_past.safetensors` (ELLA's W_past), `rng.pt` (torch / Python / NumPy RNG states) and
`progress.json` (the results so far: accuracy rows, dev rows, CE and λ·P curves, τ, λ per task, OA/BWT so far).

Restoring adds each task's update to the freshly loaded base weights in task order, the same additions the merges
made, so the restored weights are bitwise those of the uninterrupted run. The loop reseeds at every task
(`torch.manual_seed(seed·1000 + t)`), so the RNG states are restored for completeness, not for the numbers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch

from jumplora import metrics
from jumplora.continual import ContinualState, Workspace
from jumplora.errors import JumpLoRAError
from jumplora.outputs import atomic_write_text, load_updates, save_updates

PROGRESS = "progress.json"
W_PAST = "w_past.safetensors"
RNG = "rng.pt"
NOT_IN_DIGEST = ("lambdas", "device", "extra")  # λ is checked per finished task; the device may change on resume


def update_file(t: int) -> str:
    return f"task{t + 1:02d}.safetensors"


def config_digest(ws: Workspace) -> str:
    return ws.config.digest(exclude=NOT_IN_DIGEST)


def progress(ws: Workspace, state: ContinualState) -> dict:
    done = len(state.accuracy)
    square = [row + [None] * (done - len(row)) for row in state.accuracy]
    return {
        "tasks": list(ws.tasks[:done]),
        "lambdas": ws.lambdas[:done],
        "config_digest": config_digest(ws),
        "accuracy": state.accuracy,
        "dev_accuracy": state.dev_accuracy,
        "ce": state.ce,
        "penalty": state.penalty,
        "thresholds": state.thresholds,
        "oa": metrics.overall_accuracy(square),
        "bwt": metrics.backward_transfer(square),
    }


def save(directory: Path, ws: Workspace, state: ContinualState) -> None:
    for t, updates in enumerate(state.task_updates):
        save_updates(directory / update_file(t), updates)
    if state.past.weights:
        save_updates(directory / W_PAST, state.past.weights)
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
               directory / RNG)
    atomic_write_text(directory / PROGRESS, json.dumps(progress(ws, state)))


def load(directory: Path, ws: Workspace) -> ContinualState:
    """The state saved in `directory`; the task updates are added to `ws.model` (which must be the base model)."""
    saved = json.loads((directory / PROGRESS).read_text())
    done = len(saved["accuracy"])
    if saved["config_digest"] != config_digest(ws) or saved["tasks"] != list(ws.tasks[:done]):
        raise JumpLoRAError(f"checkpoint {directory} was written by another configuration or task order")
    if saved["lambdas"] != ws.lambdas[:done]:
        raise JumpLoRAError(f"checkpoint {directory} used λ {saved['lambdas']}, this run asks {ws.lambdas[:done]}")
    state = ContinualState(accuracy=saved["accuracy"], dev_accuracy=saved["dev_accuracy"], ce=saved["ce"],
                           penalty=saved["penalty"], thresholds=saved["thresholds"],
                           task_updates=[load_updates(directory / update_file(t)) for t in range(done)])
    with torch.no_grad():
        for updates in state.task_updates:
            for name, update in updates.items():
                weight = ws.model.get_submodule(name).weight
                weight.add_(update.to(weight.device, weight.dtype))
    if (directory / W_PAST).exists():
        state.past.weights = {name: w.to(ws.device) for name, w in load_updates(directory / W_PAST).items()}
    rng = torch.load(directory / RNG, weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    return state
