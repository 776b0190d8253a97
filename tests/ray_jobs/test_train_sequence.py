"""train_sequence.py on a local Ray of 2 CPUs: DDP = one process, a killed worker, resuming, refusals."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time

import pytest
import ray
import torch

from jumplora.config import RunConfig
from jumplora.continual import prepare, run_continual
from jumplora.storage import RUN_DIR
from ray_jobs import train_sequence
from ray_jobs.cli import run_main
from tests.ray_jobs import faults
from tests.ray_jobs.conftest import RAY_CPUS, SMOKE, cli_args

TASKS = 3
RELATIVE_LOSS_TOLERANCE = 1e-4  # issue 3
PAUSE_AT_CALL = SMOKE["max_train_per_task"] // SMOKE["batch_size"] + 2  # step 2 of task 2


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return tmp_path_factory.mktemp("ray-storage")


@pytest.fixture(scope="module")
def faults_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module", autouse=True)
def local_ray(tiny_cache, faults_dir):
    """The module's local Ray, whose worker processes carry the pause hook (inactive until a test arms it)."""
    hook = faults.pause_at_step(str(faults_dir), PAUSE_AT_CALL)
    ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": hook})
    yield
    ray.shutdown()


def sequence_args(cache, storage, name: str, *extra: str, tasks: int = TASKS) -> list[str]:
    return cli_args(cache, storage, "--order", "1", "--max-tasks", str(tasks), "--num-workers", "2", "--name", name,
                    *extra)


def results_of(folder) -> dict:
    return json.loads((folder / RUN_DIR / "results.json").read_text())


@pytest.fixture(scope="module")
def ddp_run(tiny_cache, storage):
    """An uninterrupted 2-worker run of the first 3 tasks of order 1 (smoke preset, dropout off)."""
    assert train_sequence.SCRIPT(sequence_args(tiny_cache, storage, "ddp")) == 0
    return storage / "ddp"


def loss(ce: list[list[float]], penalty: list[list[float]]) -> list[list[float]]:
    return [[c + p for c, p in zip(*task, strict=True)] for task in zip(ce, penalty, strict=True)]


@pytest.mark.timeout(420)
def test_two_workers_match_the_single_process_loop(ddp_run, tiny_cache):
    """CE and the loss CE + λ·P per step within 1e-4 relative; test accuracies within one example.

    The single-process loop runs each global batch in 2 micro-batches, the same two pieces the 2 workers take, on
    one thread as each 1-CPU worker does: the gradients are then summed in the same order. In one pass the loop sums
    them in another order, and a JumpLoRA run's loss is not a continuous function of such rounding (τ is set by count
    and the masks flip): on this base a 1e-7 relative change of the learning rate alone moves the loss by 2e-5."""
    ddp = results_of(ddp_run)
    assert (ddp["runtime"]["world_size"], ddp["runtime"]["per_worker_batch"]) == (2, SMOKE["batch_size"] // 2)
    config = RunConfig.of({**ddp["config"], "device": "cpu", "micro_batches": 2})
    ws = prepare(config, tiny_cache, progress=False)
    ws = dataclasses.replace(ws, tasks=ws.tasks[:TASKS], lambdas=ws.lambdas[:TASKS])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = run_continual(ws, progress=False)
    finally:
        torch.set_num_threads(threads)

    ce, penalty = ddp["loss_curves"]["ce"], ddp["loss_curves"]["penalty"]
    single_ce, single_penalty = [r.ce for r in single.records], [r.penalty for r in single.records]
    assert [len(task) for task in ce] == [len(task) for task in single_ce] == [len(task) for task in penalty]
    for ours, theirs in [(ce, single_ce), (loss(ce, penalty), loss(single_ce, single_penalty))]:
        for a, b in zip(sum(ours, []), sum(theirs, []), strict=True):
            assert abs(a - b) <= RELATIVE_LOSS_TOLERANCE * abs(b), (a, b)
    for i, row in enumerate(single.matrix("test")):
        for j, accuracy in enumerate(row):
            n_test = len(ws.encoded[ws.tasks[j]]["test"])
            assert abs(ddp["accuracy_matrix"][i][j] - accuracy) * n_test <= 1 + 1e-9, (i, j)


@pytest.mark.timeout(600)
def test_a_worker_killed_in_task_2_restarts_it_from_the_checkpoint(ddp_run, tiny_cache, storage, faults_dir):
    """The first 2 tasks of `ddp_run`'s order, a worker killed in the middle of task 2: the same numbers as `ddp_run`
    on those tasks (a task trains alike whatever follows it)."""
    (faults_dir / faults.ARMED).touch()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["rc"] = train_sequence.SCRIPT(sequence_args(tiny_cache, storage, "killed", tasks=2))
        except BaseException as error:  # reported by the assertion below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    pid_file = faults_dir / "rank1.pid"
    deadline = time.monotonic() + 420
    while not pid_file.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pid_file.exists(), f"worker 1 never reached the middle of task 2: {outcome}"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    thread.join(timeout=420)
    assert not thread.is_alive() and outcome == {"rc": 0}, outcome

    killed, uninterrupted = results_of(storage / "killed"), results_of(ddp_run)
    assert killed["accuracy_matrix"] == [row[:2] for row in uninterrupted["accuracy_matrix"][:2]]
    assert killed["loss_curves"] == {key: curves[:2] for key, curves in uninterrupted["loss_curves"].items()}


@pytest.mark.timeout(120)
def test_rerunning_a_finished_run_trains_nothing(ddp_run, tiny_cache, storage, capsys):
    checkpoints_before = sorted(p.name for p in ddp_run.glob("checkpoint_*"))
    assert train_sequence.SCRIPT(sequence_args(tiny_cache, storage, "ddp")) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert sorted(p.name for p in ddp_run.glob("checkpoint_*")) == checkpoints_before


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("extra", "message"), [
    (["--num-workers", "4"], "need 4 CPUs"),
    (["--use-gpu"], "GPUs"),
    (["--num-workers", "2", "--cpus-per-worker", "1.5"], "need 3 CPUs"),
])
def test_requests_beyond_the_cluster_are_refused(tiny_cache, storage, capsys, extra, message):
    args = cli_args(tiny_cache, storage, "--order", "1", "--max-tasks", "1", "--name", "refused", *extra)
    assert run_main(train_sequence.SCRIPT, args) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error and error.count("\n") == 1
    assert not (storage / "refused").exists()
