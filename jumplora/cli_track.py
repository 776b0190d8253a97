"""`jumplora track`: log finished runs and grid / train_sequence.py folders to MLflow afterwards, as they would have
logged themselves (`jumplora.cli` builds its parser and calls it)."""

from __future__ import annotations

import sys
from pathlib import Path

from jumplora import tracking
from jumplora.errors import JumpLoRAError


def track_command(args) -> int:
    """Log each source to MLflow as its run would have logged itself; one line per source says what was done."""
    sources = [checked_track_source(source) for source in args.sources]  # bad input fails before anything is logged
    tracker = tracking.Tracker(tracking.open_store(tracking.resolve_uri(args.tracking_uri), writes=True))
    for kind, source in sources:
        line = track_run_directory(tracker, source) if kind == "run" else job_folders().catch_up(tracker, source)
        if tracker.failed:
            print(f"jumplora: error: MLflow at {tracker.uri} failed: run `jumplora track` again once it answers",
                  file=sys.stderr)
            return 1
        print(line)
    return 0


def job_folders():
    """`tracking.folders`, which logs the Ray jobs' folders (its storage needs the ray extra's pyarrow)."""
    try:
        from jumplora.tracking import folders
    except ImportError as error:
        raise JumpLoRAError(f"logging a grid or train_sequence.py folder needs the ray extra: pip install "
                            f"'jumplora[ray]' ({error})") from None
    return folders


def checked_track_source(source: str) -> tuple[str, str]:
    """("run", a `jumplora run` directory) or ("ray", a grid_lambda.py / train_sequence.py folder, path or URI), what
    it holds read as data first (as `jumplora report` reads a results.json, with what logging it needs:
    `results.RunResults`, `tracking.runs.LOGGED`; a grid's manifest), so that a damaged source is refused before
    anything is logged."""
    from jumplora.checkpoints import RUN_CHECKPOINTS
    from jumplora.outputs import RESULTS
    from jumplora.report.runs import read_run
    from jumplora.tracking.runs import LOGGED

    path, job_files = Path(source), ("manifest.json", "job.json")
    if "://" not in source and not path.is_dir():
        raise JumpLoRAError(f"{source} is not a directory: pass a run directory or a grid / train_sequence.py folder")
    if "://" in source or any((path / name).exists() for name in job_files):
        job_folders().check(source)
        return "ray", source
    if path.name == "run" and any((path.parent / name).exists() for name in job_files):
        job_folders().check(str(path.parent))
        return "ray", str(path.parent)  # the run directory a grid or train_sequence.py published
    if (path / "single_task.json").exists() or (path.name == "run" and path.parent.parent.name == "runs"):
        raise JumpLoRAError(f"{source} belongs to a reproduce.py sweep: submit the sweep again, which logs it")
    if not ((path / RESULTS).exists() or (path / RUN_CHECKPOINTS).is_dir()):
        raise JumpLoRAError(f"{source} holds no {RESULTS} and no checkpoints: pass a `jumplora run` directory or a "
                            "grid / train_sequence.py folder")
    if (path / RESULTS).exists():
        read_run(path / RESULTS, source, needs=LOGGED)
    return "run", source


def track_run_directory(tracker, source: str) -> str:
    """A finished run directory logged; of an unfinished one whose process is gone, the runs it left RUNNING marked
    KILLED; one being written is left to its process."""
    from jumplora.lock import DirectoryLock
    from jumplora.outputs import RESULTS
    from jumplora.results import read_results
    from jumplora.uncertainty import NO_FLAGS

    run_dir = Path(source)
    if (run_dir / RESULTS).exists():
        before = tracker.changes
        tracking.log_run_directory(tracker, run_dir)
        note = f"; {NO_FLAGS}" if read_results(run_dir / RESULTS).intervals is None else ""
        return f"{run_dir}: {tracking.logged_since(tracker, before)}{note}"
    holder = DirectoryLock(run_dir, "", "").read()
    if holder is not None and holder.is_gone() is not True:
        return f"{run_dir}: being written by {holder.describe()}, which logs it itself"
    closed = tracking.close_interrupted(tracker, run_dir)
    return (f"{run_dir}: not finished (no {RESULTS}) and no process writes it: {len(closed)} MLflow run(s) it left "
            "RUNNING marked KILLED; run its `jumplora run` command again to go on with it")
