"""A checkpoint after a finished task: everything needed to go on with the next task as if never interrupted (why
that is all: docs/DECISIONS.md, "Seeding"; what a resume checks: "Resuming needs the same data, and every file on
record"). Files: one `taskNN.safetensors` per finished task (its merged update β·ΔW_final per adapted module, sparse
ones compact), `memory.safetensors` (the method's memory: ELLA's W_past, EWC's Fisher, O-LoRA's past A),
`model.safetensors` when every weight trains (EWC, SeqFT: also EWC's θ* for the next task), `progress.json` (the task
records without their updates, the settings, the data's fingerprint, the other files it needs) and, written last,
`checksums.json` (size and SHA-256 of every other file). Restoring adds each task's update to the freshly loaded base
weights in task order, the same additions the merges made: bitwise the uninterrupted run's weights."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

import safetensors.torch
import torch

from jumplora import ownership
from jumplora.continual import ContinualState, Workspace
from jumplora.errors import JumpLoRAError, writing
from jumplora.methods import get_method
from jumplora.outputs import load_updates, save_updates
from jumplora.ownership import Target, write_text
from jumplora.record import TaskRecord

PROGRESS = "progress.json"
MEMORY = "memory.safetensors"
MODEL = "model.safetensors"
CHECKSUMS = "checksums.json"
NOT_IN_DIGEST = ("lambdas", "device")  # λ is checked per finished task; the device may change on resume
RUN_CHECKPOINTS = "checkpoints"  # in a `jumplora run` directory
KEPT = 2  # newest checkpoints kept in a run directory
AFTER_TASK = re.compile(r"after_task(\d+)")


class DamagedCheckpointError(JumpLoRAError):
    """A checkpoint file is missing or differs from what was saved: resuming from it would silently change the run."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(f"checkpoint {directory} is damaged: {problem}")
        self.problem = problem


class ConfigMismatchError(JumpLoRAError):
    """The checkpoint was written by another configuration, task order or λ: resuming from it would mix two runs."""


def update_file(t: int) -> str:
    return f"task{t + 1:02d}.safetensors"


def config_digest(ws: Workspace) -> str:
    return ws.config.digest(exclude=NOT_IN_DIGEST)


def digested_config(ws: Workspace) -> dict:
    """The settings `config_digest` hashes, kept so that a refusal can name the ones that changed."""
    return {key: value for key, value in ws.config.to_dict().items() if key not in NOT_IN_DIGEST}


def changed_settings(saved: dict | None, ws: Workspace) -> str:
    """`--seed 42, now 7; …` for each setting that differs (a checkpoint from before they were kept: not named)."""
    if not isinstance(saved, dict):
        return "other settings (not recorded in this checkpoint)"
    now = digested_config(ws)
    return "; ".join(f"--{key.replace('_', '-')} {json.dumps(saved.get(key))}, now {json.dumps(now.get(key))}"
                     for key in sorted(set(saved) | set(now)) if saved.get(key) != now.get(key))


def needed_files(saved: dict, ws: Workspace) -> list[str]:
    """The files besides progress.json that the checkpoint must hold: as it listed them, or for a checkpoint from
    before it did, each task's update and (every weight trained) the model."""
    if "files" in saved:
        return list(saved["files"])
    whole = get_method(ws.config.method).adapter.whole_model
    return [update_file(t) for t in range(len(saved["records"]))] + ([MODEL] if whole else [])


def save(directory: Path, ws: Workspace, state: ContinualState, previous: Path | None = None) -> None:
    """The checkpoint of `state` in `directory`. A task's update that the checkpoint `previous` holds with the same
    content (checked by SHA-256, which `checksums.json` needs anyway) is hard-linked from it instead of written."""
    written = [update_file(t) for t in range(len(state.records))]
    previous_sums = recorded_sums(previous) if previous is not None else {}
    known: dict[str, str] = {}  # SHA-256 of the files linked from `previous`, checked once
    for name, record in zip(written, state.records, strict=True):
        if name in previous_sums and link_same(previous / name, directory / name, previous_sums[name]):
            known[name] = previous_sums[name]
        else:
            save_updates(directory / name, record.update)
    if state.memory:
        save_updates(directory / MEMORY, state.memory)
        written.append(MEMORY)
    if get_method(ws.config.method).adapter.whole_model:  # every weight trained: the checkpoint keeps the model
        with ownership.written(directory / MODEL) as tmp:
            safetensors.torch.save_model(ws.model, str(tmp))  # tied weights (T5's embeddings) saved once
        written.append(MODEL)
    done = len(state.records)
    progress = {"tasks": list(ws.tasks[:done]), "lambdas": ws.lambdas[:done], "config_digest": config_digest(ws),
                "config": digested_config(ws), "data_fingerprint": ws.benchmark.fingerprint, "files": list(written),
                "records": [record.to_json() for record in state.records], "runtime": state.runtime}
    write_text(directory / PROGRESS, json.dumps(progress))
    written.append(PROGRESS)
    sums = {name: {"bytes": (directory / name).stat().st_size,
                   "sha256": known.get(name) or sha256_of(directory / name)} for name in written}
    write_text(directory / CHECKSUMS, json.dumps(sums, indent=1))


def recorded_sums(directory: Path) -> dict[str, str]:
    """{file: SHA-256} as `checksums.json` of `directory` records it ({} when unreadable)."""
    try:
        return {name: entry["sha256"] for name, entry in json.loads((directory / CHECKSUMS).read_text()).items()}
    except (OSError, ValueError, LookupError, TypeError, AttributeError):
        return {}


def link_same(source: Path, target: Path, digest: str) -> bool:
    """Hard-link `source` to `target` if it still has the SHA-256 `digest` (a damaged file is not carried over)."""
    try:
        os.link(source, target)
    except OSError:
        return False
    if sha256_of(target) == digest:
        return True
    target.unlink()
    return False


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def find_damage(directory: Path) -> str | None:
    """What is wrong with the checkpoint in `directory`, in a few words naming the file, or None when every file has
    the size and SHA-256 that `save` recorded."""
    try:
        recorded = {name: (entry["bytes"], entry["sha256"])
                    for name, entry in json.loads((directory / CHECKSUMS).read_text()).items()}
    except FileNotFoundError:
        return f"{CHECKSUMS} is missing"
    except (OSError, ValueError, LookupError, TypeError, AttributeError):
        return f"{CHECKSUMS} is unreadable"
    for name, (size, digest) in recorded.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        found = path.stat().st_size
        if found < size:
            return f"{name} is truncated ({found} of {size} bytes)"
        if found != size:
            return f"{name} has {found} bytes, {size} saved"
        if sha256_of(path) != digest:
            return f"{name} differs from what was saved (SHA-256 mismatch)"
    return None


def load(directory: Path, ws: Workspace) -> ContinualState:
    """The state saved in `directory`; the task updates are added to `ws.model` (which must be the base model).
    A damaged checkpoint is refused before anything is changed."""
    problem = find_damage(directory)
    if problem is not None:
        raise DamagedCheckpointError(directory, problem)
    recorded = recorded_sums(directory)
    saved = json.loads((directory / PROGRESS).read_text()) if PROGRESS in recorded else None
    unrecorded = [PROGRESS] if saved is None else [name for name in needed_files(saved, ws) if name not in recorded]
    if unrecorded:
        raise DamagedCheckpointError(directory, f"{CHECKSUMS} does not record {', '.join(unrecorded)}")
    done = len(saved["records"])
    if saved["config_digest"] != config_digest(ws):
        raise ConfigMismatchError(f"checkpoint {directory} was written with other settings: "
                                  f"{changed_settings(saved.get('config'), ws)}")
    if saved["tasks"] != list(ws.tasks[:done]):
        raise ConfigMismatchError(f"checkpoint {directory} trained the tasks {', '.join(saved['tasks'])}, this run "
                                  f"orders {', '.join(ws.tasks[:done])}")
    if saved["lambdas"] != ws.lambdas[:done]:
        raise ConfigMismatchError(f"checkpoint {directory} used λ {saved['lambdas']}, this run asks "
                                  f"{ws.lambdas[:done]}")
    if saved.get("data_fingerprint", ws.benchmark.fingerprint) != ws.benchmark.fingerprint:
        raise ConfigMismatchError(f"checkpoint {directory} trained on other data: the splits read from "
                                  f"{ws.config.data_dir or 'the synthetic benchmark'} changed since (fingerprint "
                                  f"{saved['data_fingerprint'][:12]}, now {ws.benchmark.fingerprint[:12]})")
    state = ContinualState(records=[TaskRecord.from_json(data, load_updates(directory / update_file(t)))
                                    for t, data in enumerate(saved["records"])], runtime=saved["runtime"])
    if (directory / MODEL).exists():
        safetensors.torch.load_model(ws.model, str(directory / MODEL), device=str(ws.device))
    else:
        with torch.no_grad():
            for record in state.records:
                for name, update in record.update.items():
                    weight = ws.model.get_submodule(name).weight
                    weight.add_(update.to(weight.device, weight.dtype))
    if (directory / MEMORY).exists():
        state.memory = {name: w.to(ws.device) for name, w in load_updates(directory / MEMORY).items()}
    return state


def load_newest_intact(candidates: Iterable[tuple[str, AbstractContextManager]], ws: Workspace,
                       warn: bool = True) -> ContinualState:
    """The state of the first undamaged checkpoint of `candidates` (newest first; each a name and a context giving
    its local directory, entered only when reached), else a fresh start. Retraining a few tasks costs time, resuming
    from a damaged checkpoint would change the run unseen: with `warn`, one line on stderr says what was skipped."""
    skipped, state, source = [], ContinualState(), "the base model"
    for name, opened in candidates:
        with opened as directory:
            try:
                state, source = load(Path(directory), ws), name
                break
            except DamagedCheckpointError as error:
                skipped.append(f"{name} ({error.problem})")
    if skipped and warn:
        print(f"warning: skipped damaged checkpoint(s) {'; '.join(skipped)}; resuming from {source}", file=sys.stderr)
    return state


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints of a `jumplora run` directory, newest first."""
    folder = run_dir / RUN_CHECKPOINTS
    found = [(int(match.group(1)), path) for path in (folder.iterdir() if folder.is_dir() else ())
             if path.is_dir() and (match := AFTER_TASK.fullmatch(path.name))]
    return [path for _, path in sorted(found, reverse=True)]


def save_in_run(target: Target, ws: Workspace, state: ContinualState) -> Path:
    """The checkpoint after the last task of `state` in the run directory `target` writes, under `checkpoints/`:
    written aside and renamed into place (`Target.tree`: a cut-off save leaves no checkpoint under a final name, and
    one there of a run that went back before this task is replaced as the record allows); then only the newest
    `KEPT` are kept (deleted by the record: a file of the user's among them stays)."""
    name = f"{RUN_CHECKPOINTS}/after_task{len(state.records):02d}"
    existing = run_checkpoints(target.path)
    with writing(target.path / name), target.tree(name) as tmp:
        save(tmp, ws, state, previous=existing[0] if existing else None)
    for old in run_checkpoints(target.path)[KEPT:]:
        target.remove(old.relative_to(target.path).as_posix())
    return target.path / name


def resume_in_run(run_dir: Path, ws: Workspace) -> ContinualState:
    """The state of the newest intact checkpoint of `run_dir` (`ws.model` then holds its weights), else a fresh
    state; a `ConfigMismatchError` if it was written by another configuration."""
    candidates = [(str(path), contextlib.nullcontext(path)) for path in run_checkpoints(run_dir)]
    return load_newest_intact(candidates, ws)


def drop_run_checkpoints(target: Target) -> None:
    """A finished run's checkpoints (as its record names them): its run directory holds everything they did."""
    target.remove(RUN_CHECKPOINTS)
