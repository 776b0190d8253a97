"""Ray tasks on a finished trial's checkpoint, for the grid's driver: the chosen trial's test row (`with_test_row`)
and the run directory of the last one (`publish_checkpoint`); and the run directory itself (`publish`), which a
`train_sequence.py` worker writes at the end of its order."""

from __future__ import annotations

import tempfile
from pathlib import Path

from jumplora import continual
from jumplora.cost import Cost
from jumplora.methods import get_method
from jumplora.results import RunResults
from jumplora.storage import RUN_DIR, Storage
from jumplora.tracking import MERGED_MODEL_DIR
from ray_jobs.jobs import Job


def restore(ws: continual.Workspace, checkpoint) -> continual.ContinualState:
    """Exactly `checkpoint` (a chosen trial's): a damaged one is an error, `checkpoints.DamagedCheckpointError`."""
    from jumplora import checkpoints  # torch: a worker's, not the driver's, which hands Ray these functions

    if checkpoint is None:
        return continual.ContinualState()
    with checkpoint.as_directory() as directory:
        return checkpoints.load(Path(directory), ws)


def with_test_row(job: Job, checkpoint, folder_uri: str, name: str) -> tuple[str, list[float], int]:
    """A Ray task: the checkpoint of a trial that evaluated dev only (a λ-grid trial), with the test row of its last
    task filled in, saved as the checkpoint folder `name` of `folder_uri`; returns its path, that row and the number
    of test examples evaluated."""
    from jumplora import checkpoints

    ws = job.workspace("auto")
    state = restore(ws, checkpoint)
    continual.evaluate_test_row(ws, state, progress=False)
    folder = Storage(folder_uri)
    with tempfile.TemporaryDirectory() as directory:
        checkpoints.save(Path(directory), ws, state)
        folder.replace_folder(Path(directory), name)  # over what a failed attempt left
    evaluated = continual.evaluated_examples(ws, continual.seen_tasks(ws, len(state.records) - 1), "test")
    return folder.child(name).path, state.records[-1].test, evaluated


def publish_checkpoint(job: Job, checkpoint, baselines: list[dict], storage_uri: str,
                       merged_model: bool = False, run_dir: str = RUN_DIR) -> RunResults:
    """A Ray task: the run directory `run_dir` of a checkpoint (a grid's last selected trial; a seed's), with its
    merged model if `merged_model`; its a0 from the grid's single-task trials (`baselines`: stage 1's records, tasks
    2..T) and its first training (`SingleTaskBaselines.after_first`)."""
    ws = job.workspace("auto")
    state = restore(ws, checkpoint)
    cost = Cost(len(baselines), sum(b.get("steps") or 0 for b in baselines),
                sum(b.get("seconds") or 0.0 for b in baselines))
    shared = get_method(job.run.method).adapter is continual.SHARED_ADAPTER
    rest, rest_flags = [b["a0"] for b in baselines], [b.get("a0_flags") for b in baselines]
    a0 = continual.SingleTaskBaselines.after_first(rest, rest_flags, shared, cost, state.records[0])
    return publish(ws, state, Storage(storage_uri), a0, merged_model, run_dir)


def publish(ws: continual.Workspace, state: continual.ContinualState, storage: Storage,
            baselines: continual.SingleTaskBaselines | None = None, merged_model: bool = False,
            run_dir: str = RUN_DIR) -> RunResults:
    """Write the `jumplora` run directory (`summarise` payload, merged updates; with `merged_model` the merged model
    and its tokenizer in Hugging Face format, before results.json marks the directory complete) to
    `storage/<run_dir>` (`run`, or a grid's seed's `runs/seed<S>`)."""
    results = continual.summarise(ws, state, baselines)
    if merged_model:
        with tempfile.TemporaryDirectory() as directory:
            ws.model.save_pretrained(directory)
            ws.tokenizer.save_pretrained(directory)
            storage.upload(Path(directory), f"{run_dir}/{MERGED_MODEL_DIR}")
    storage.publish_run(run_dir, results, [record.update for record in state.records])
    return results
