"""A checkpoint after a finished task: everything needed to go on with the next task as if never interrupted.

Files: one `taskNN.safetensors` per finished task (its merged update β·ΔW_final per adapted module, sparse ones
compact), `w_past.safetensors` (ELLA's W_past) and `progress.json` (the task records so far, without their updates:
accuracy rows, CE and λ·P curves, τ, sparsity; and OA/BWT so far).

Restoring adds each task's update to the freshly loaded base weights in task order, the same additions the merges
made, so the restored weights are bitwise those of the uninterrupted run. Nothing else is needed: the loop seeds the
adapter of task t from (seed, t) alone (`torch.manual_seed(seed·1000 + t)`) and shuffles from (seed, task)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from jumplora import metrics
from jumplora.continual import ContinualState, Workspace
from jumplora.errors import JumpLoRAError
from jumplora.outputs import atomic_write_text, load_updates, save_updates
from jumplora.record import TaskRecord

PROGRESS = "progress.json"
W_PAST = "w_past.safetensors"
NOT_IN_DIGEST = ("lambdas", "device")  # λ is checked per finished task; the device may change on resume


def update_file(t: int) -> str:
    return f"task{t + 1:02d}.safetensors"


def config_digest(ws: Workspace) -> str:
    return ws.config.digest(exclude=NOT_IN_DIGEST)


def save(directory: Path, ws: Workspace, state: ContinualState) -> None:
    for t, record in enumerate(state.records):
        save_updates(directory / update_file(t), record.update)
    if state.past.weights:
        save_updates(directory / W_PAST, state.past.weights)
    done = len(state.records)
    square = [row + [None] * (done - len(row)) for row in state.matrix("test")]
    progress = {"tasks": list(ws.tasks[:done]), "lambdas": ws.lambdas[:done], "config_digest": config_digest(ws),
                "records": [record.to_json() for record in state.records],
                "oa": metrics.overall_accuracy(square), "bwt": metrics.backward_transfer(square)}
    atomic_write_text(directory / PROGRESS, json.dumps(progress))


def load(directory: Path, ws: Workspace) -> ContinualState:
    """The state saved in `directory`; the task updates are added to `ws.model` (which must be the base model)."""
    saved = json.loads((directory / PROGRESS).read_text())
    done = len(saved["records"])
    if saved["config_digest"] != config_digest(ws) or saved["tasks"] != list(ws.tasks[:done]):
        raise JumpLoRAError(f"checkpoint {directory} was written by another configuration or task order")
    if saved["lambdas"] != ws.lambdas[:done]:
        raise JumpLoRAError(f"checkpoint {directory} used λ {saved['lambdas']}, this run asks {ws.lambdas[:done]}")
    state = ContinualState(records=[TaskRecord.from_json(data, load_updates(directory / update_file(t)))
                                    for t, data in enumerate(saved["records"])])
    with torch.no_grad():
        for record in state.records:
            for name, update in record.update.items():
                weight = ws.model.get_submodule(name).weight
                weight.add_(update.to(weight.device, weight.dtype))
    if (directory / W_PAST).exists():
        state.past.weights = {name: w.to(ws.device) for name, w in load_updates(directory / W_PAST).items()}
    return state
