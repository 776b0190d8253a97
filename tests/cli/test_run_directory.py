"""`jumplora run` and its run directory: one writer at a time, a checkpoint after each task, resuming after SIGKILL
with the numbers of an uninterrupted run, `--overwrite` swapped in only when complete, and a full disk as one line.

One uninterrupted 3-task run (module fixture) is the reference; the killed run is a subprocess paused at the start of
task 3 (a wrapper around `jumplora.continual.loop.train`, from outside the product)."""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch
from mlflow import MlflowClient
from safetensors import SafetensorError

import jumplora.continual
from jumplora import checkpoints, ownership, tiny, tracking
from jumplora.cli import main
from jumplora.lock import lock_path
from jumplora.outputs import load_updates
from jumplora.ownership.checks import staging_dir
from jumplora.ownership.folders import LocalFolder, read_owner

REPO = Path(__file__).resolve().parents[2]
CAPS = ["--max-train-per-task", "65", "--max-eval-per-task", "8"]  # 3 optimizer steps per task
SAME = ("accuracy_matrix", "dev_accuracy_matrix", "loss_curves", "thresholds", "sparsity", "jaccard", "oa", "bwt",
        "lambdas", "config", "tasks", "majority_baseline", "test_flags", "dev_flags", "intervals")
PAUSE_AT_TASK_3 = """
import sys, time
from pathlib import Path
import jumplora.continual.loop
train = jumplora.continual.loop.train
def pausing(ws, t, *args, **kwargs):
    if t == 2:
        Path(sys.argv[1]).write_text("in task 3")
        time.sleep(600)
    return train(ws, t, *args, **kwargs)
jumplora.continual.loop.train = pausing
from jumplora.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_args(out: Path, cache: Path, *extra: str, tracking_uri: str | None = None) -> list[str]:
    tracked = ["--tracking-uri", tracking_uri] if tracking_uri else ["--no-tracking"]
    return ["run", "--quiet", "--order", "1", "--max-tasks", "3", *tracked, "--out", str(out), "--cache-dir",
            str(cache), *CAPS, *extra]


@dataclasses.dataclass
class Outcome:
    code: int
    err: str
    trained: list[str]  # the task of each training, in order (MTL's one training: the first task)


def run_counted(argv: list[str]) -> Outcome:
    """`jumplora run` in this process, counting the task trainings and capturing stderr."""
    trained, train = [], jumplora.continual.loop.train

    def counted(ws, t, *args, **kwargs):
        trained.append(ws.tasks[t])
        return train(ws, t, *args, **kwargs)

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(jumplora.continual.loop, "train", counted)
        code = main(argv)
    return Outcome(code, err.getvalue(), trained)


def statuses(uri: str) -> dict[str, str]:
    """The status of each run of order 1 in the store, by name (the parent as "run")."""
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("jumplora-order1").experiment_id])
    return {"run" if r.data.tags[tracking.KIND_TAG] == "run" else r.info.run_name: r.info.status for r in runs}


def results_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def uninterrupted(tiny_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    done = run_counted(run_args(out, tiny_cache))
    assert done.code == 0, done.err
    assert done.trained == ["dbpedia", "amazon", "yahoo"] and not (out / checkpoints.RUN_CHECKPOINTS).exists()
    return out


@dataclasses.dataclass
class Killed:
    out: Path
    pid: int
    uri: str  # its MLflow store
    second: Outcome  # a second run on the same --out while the first one held it


@pytest.fixture(scope="module")
def killed(tiny_cache, tmp_path_factory) -> Killed:
    """`jumplora run` in a subprocess, paused at the start of task 3; a second run on the same --out meanwhile; then
    the first one is SIGKILLed."""
    root = tmp_path_factory.mktemp("killed")
    out, marker, log, uri = root / "run", root / "in-task-3", root / "first.log", f"sqlite:///{root / 'mlflow.db'}"
    argv = run_args(out, tiny_cache, tracking_uri=uri)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with log.open("w") as output:
        first = subprocess.Popen([sys.executable, "-c", PAUSE_AT_TASK_3, str(marker), *argv], env=env,
                                 stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not marker.exists():
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        second = run_counted(argv)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    return Killed(out, first.pid, uri, second)


def test_a_second_run_on_the_same_out_trains_nothing_and_names_the_holder(killed):
    second = killed.second
    assert second.code == 2 and second.trained == []
    assert second.err.splitlines() == [
        f"jumplora: error: {killed.out} is being written by `jumplora run` (pid {killed.pid} on "
        f"{socket.gethostname()}, since {json.loads(lock_path(killed.out).read_text())['started']}): wait until "
        "it ends, or pass another --out"]


def test_a_run_killed_in_task_3_goes_on_after_task_2_with_the_numbers_of_an_uninterrupted_run(killed, uninterrupted,
                                                                                            tiny_cache, capsys):
    out = killed.out
    assert [p.name for p in checkpoints.run_checkpoints(out)] == ["after_task02", "after_task01"]
    first, second = (out / "checkpoints" / f"after_task0{t}" / "task01.safetensors" for t in (1, 2))
    assert first.stat().st_ino == second.stat().st_ino  # task 1's update, linked into the next checkpoint
    assert lock_path(out).exists() and not (out / "results.json").exists()  # left by the killed process
    taken_over = f"warning: taking over the lock of {out} from `jumplora run` (pid {killed.pid} on "

    other = run_counted(run_args(out, tiny_cache, "--seed", "7"))  # another configuration: refused, nothing trained
    lines = other.err.splitlines()
    assert other.code == 2 and other.trained == [] and len(lines) == 2 and lines[0].startswith(taken_over)
    assert lines[1].startswith(f"jumplora: error: {out} holds a run cut off under other settings or data (checkpoint "
                               f"{out / 'checkpoints' / 'after_task02'} was written with other settings: --seed 42, "
                               "now 7)")
    assert lines[1].endswith("run it again with its own options and data to resume it, or pass --overwrite or another "
                             "--out")

    # its MLflow run, left RUNNING by the killed process, is marked KILLED when the run directory is logged again
    assert main(["track", str(out), "--tracking-uri", killed.uri]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{out}: not finished (no results.json) and no process writes it: 1 MLflow run(s) it left RUNNING marked "
        "KILLED; run its `jumplora run` command again to go on with it"]
    assert statuses(killed.uri) == {"run": "KILLED", "task01-dbpedia": "FINISHED", "task02-amazon": "FINISHED"}

    (out / "notes.txt").write_text("the user's, beside the cut-off run\n")  # a resume deletes only its own
    resumed = run_counted(run_args(out, tiny_cache, tracking_uri=killed.uri))
    assert resumed.code == 0, resumed.err
    assert (out / "notes.txt").read_text() == "the user's, beside the cut-off run\n"
    assert resumed.trained == ["yahoo"]  # tasks 1 and 2 come from the checkpoint
    assert f"resuming {out} after training 2 of 3 (amazon)" in resumed.err.splitlines()
    assert statuses(killed.uri) == {"run": "FINISHED", "task01-dbpedia": "FINISHED", "task02-amazon": "FINISHED",
                                    "task03-yahoo": "FINISHED"}  # the same parent, reattached
    ours, theirs = results_of(out), results_of(uninterrupted)
    for key in SAME:
        assert ours[key] == theirs[key], key
    # the same seed and flags: the same intervals, byte for byte, in results.json and summary.txt (all but its cost)
    assert json.dumps(ours["intervals"]) == json.dumps(theirs["intervals"]) and len(ours["intervals"]["bwt"]) == 2
    summaries = [[line for line in (run / "summary.txt").read_text().splitlines() if not line.startswith("cost:")]
                 for run in (out, uninterrupted)]
    assert summaries[0] == summaries[1] and any(line.startswith("OA ") and "[" in line for line in summaries[0])
    summed, reference = load_updates(out / "updates.safetensors"), load_updates(uninterrupted / "updates.safetensors")
    assert summed.keys() == reference.keys() and all(torch.equal(summed[k], reference[k]) for k in reference)
    assert (out / "updates.safetensors").read_bytes() == (uninterrupted / "updates.safetensors").read_bytes()  # ±0.0
    assert not (out / checkpoints.RUN_CHECKPOINTS).exists() and not lock_path(out).exists()


def test_an_interrupted_overwrite_leaves_the_completed_run_as_it_was(uninterrupted, tiny_cache, tmp_path,
                                                                    monkeypatch, capsys):
    out = tmp_path / "run"
    shutil.copytree(uninterrupted, out)
    before = listing(out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(jumplora.continual.loop, "run_task", interrupted)
    assert main(run_args(out, tiny_cache, "--overwrite")) == 130
    assert capsys.readouterr().err.splitlines()[-1].startswith("jumplora: interrupted; no results.json was written")
    assert listing(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging, no lock


def test_overwrite_with_another_method_leaves_no_file_of_the_old_run(uninterrupted, tiny_cache, tmp_path):
    """`--overwrite` replaces, once the new run is complete, the completed run at `--out` and the model an earlier run
    saved at `--save-model`, each whole."""
    out, model = tmp_path / "run", tmp_path / "model"
    shutil.copytree(uninterrupted, out)
    assert (out / "bwt_radar.png").exists()
    with ownership.Target(model, ownership.MODEL, "jumplora run --save-model", "--save-model", aside=True) as earlier:
        ownership.write_text(earlier.path / "pytorch_model.bin", "an earlier run's weights")  # not written today
    done = run_counted(run_args(out, tiny_cache, "--overwrite", "--method", "mtl", "--max-tasks", "1", "--save-model",
                                str(model)))
    assert done.code == 0 and len(done.trained) == 1
    assert results_of(out)["method"] == "mtl" and results_of(out)["tasks"] == ["dbpedia"]
    assert sorted(p.name for p in out.iterdir()) == sorted([
        ownership.MARKER, "accuracy_heatmap.png", "accuracy_matrix.csv", "overlap.png", "results.json",
        "sparsity_by_layer.png", "summary.txt", "updates.safetensors"])  # MTL has no BWT radar: the old one went
    saved = read_owner(LocalFolder(model)).files
    assert "config.json" in saved and "model.safetensors" in saved and "pytorch_model.bin" not in saved
    assert sorted(saved) == sorted(p.name for p in model.iterdir() if p.name != ownership.MARKER)
    assert all(hashlib.sha256((model / name).read_bytes()).hexdigest() == digest for name, digest in saved.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "run"] and not staging_dir(out).exists()


def full_disk(*args, **kwargs):
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def test_a_full_disk_at_the_first_checkpoint_is_one_line_and_exit_2(tiny_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)  # as safetensors reports ENOSPC (`outputs`' writer)
    out = tmp_path / "run"
    assert main(run_args(out, tiny_cache, "--max-tasks", "1")) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jumplora: error: cannot write {out / 'checkpoints' / 'after_task01'}: No space left on device: free some "
        "space or write elsewhere"]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [ownership.MARKER, "checkpoints"]  # no partial
    # file, no results.json
    assert json.loads((out / ownership.MARKER).read_text())["aside"] == []  # nothing named aside is left
    assert not lock_path(out).exists()


def test_files_the_user_adds_between_two_tasks_are_kept_named_and_stop_a_later_overwrite(tiny_cache, tmp_path,
                                                                                         monkeypatch, capsys):
    """A note beside a long run and files in its checkpoints folder, added while task 2 trains: the run ends, deleting
    only its own checkpoints, and names what it kept; a later `--overwrite` is refused naming them, never asking for
    `--overwrite`; the user's files are byte-identical throughout."""
    out = tmp_path / "run"
    mine = {"notes.txt": b"a note beside a long run\n", "checkpoints/mine.txt": b"kept with the checkpoints\n"}
    train = jumplora.continual.loop.train

    def adding(ws, t, *args, **kwargs):
        if t == 1:
            for name, data in mine.items():
                (out / name).write_bytes(data)
            (out / "checkpoints" / "empty").mkdir()
        return train(ws, t, *args, **kwargs)

    monkeypatch.setattr(jumplora.continual.loop, "train", adding)
    assert main(run_args(out, tiny_cache, "--max-tasks", "2")) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {out} keeps checkpoints/empty/, checkpoints/mine.txt, which jumplora did not write or which "
        "changed since it wrote them: it deleted only its own files"]
    assert {name: (out / name).read_bytes() for name in mine} == mine and (out / "results.json").exists()
    before = listing(out)
    assert main(run_args(out, tiny_cache, "--max-tasks", "2", "--overwrite")) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jumplora: error: --out {out} is a run directory of jumplora's, but holds checkpoints/empty/, "
        "checkpoints/mine.txt, notes.txt, which jumplora did not write: move them out (jumplora deletes only what it "
        "wrote, unchanged) or pass another directory"]
    assert listing(out) == before and (out / "checkpoints" / "empty").is_dir()


def test_a_run_cut_off_resumes_only_on_the_data_it_trained_on(tiny_cache, tmp_path, monkeypatch, capsys):
    from tests.cli.test_bad_input import TRAIN, write_folder

    data, out = write_folder(tmp_path / "data", train_json=TRAIN), tmp_path / "run"
    model = tiny.named_model_dir(tiny.TINY, None, tiny_cache, progress=False)
    argv = ["run", "--quiet", "--no-tracking", "--method", "inclora", "--data-dir", str(data), "--model", str(model),
            "--max-tasks", "2", "--batch-size", "1", "--out", str(out), "--cache-dir", str(tiny_cache)]
    run_task = jumplora.continual.loop.run_task

    def cut_off_in_task_2(ws, state, t, *rest):
        if t == 1:
            raise KeyboardInterrupt
        return run_task(ws, state, t, *rest)

    with monkeypatch.context() as patch:
        patch.setattr(jumplora.continual.loop, "run_task", cut_off_in_task_2)
        assert main(argv) == 130
    train = data / "G" / "a" / "train.json"
    train.write_text(TRAIN.replace("train 1", "train one"))  # task a's data, edited between the two runs
    capsys.readouterr()
    again = run_counted(argv)
    saved = json.loads((out / "checkpoints" / "after_task01" / "progress.json").read_text())["data_fingerprint"]
    assert again.code == 2 and again.trained == [] and len(again.err.splitlines()) == 1
    assert again.err.startswith(
        f"jumplora: error: {out} holds a run cut off under other settings or data (checkpoint "
        f"{out / 'checkpoints' / 'after_task01'} trained on other data: the splits read from {data} changed since "
        f"(fingerprint {saved[:12]}, now ")
    assert again.err.split(", now ")[1][:12] != saved[:12]
    train.write_text(TRAIN)  # the data it trained on: it goes on after task 1
    resumed = run_counted(argv)
    assert resumed.code == 0 and resumed.trained == ["b"], resumed.err
