"""Connecting to Ray and refusing requests the cluster cannot hold, before anything is scheduled: a local Ray's CPUs
and GPUs are known before it starts (`local_start`; ray_jobs/README.md, "Resources"). Ray is imported where it is
used, so that a script's arguments are parsed and checked without it."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ray_jobs
from jumplora.errors import JumpLoRAError
from jumplora.storage import Storage

TRIAL_DRIVER_CPUS = 0.01  # a Tune trial that only drives a TorchTrainer holds almost nothing (see ENVIRONMENT.md)
QUIET_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air")
AUTO = "auto"  # --gpus-per-worker: as the cluster has them; --lambdas-per-trial: `stages.lambdas_per_trial`


@dataclass(frozen=True)
class WorkerRequest:
    """One training: `workers` processes of `cpus` CPUs and `gpus` GPUs each, plus `driver_cpus` for its driver."""

    workers: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    driver_cpus: float = 0.0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.cpus <= 0 or self.gpus < 0:
            raise JumpLoRAError(f"workers must be ≥ 1, CPUs per worker > 0 and GPUs per worker ≥ 0; got "
                                f"{self.workers} workers, {self.cpus:g} CPUs, {self.gpus:g} GPUs")

    @property
    def total_cpus(self) -> float:
        return self.workers * self.cpus + self.driver_cpus

    @property
    def total_gpus(self) -> float:
        return self.workers * self.gpus

    def describe(self) -> str:
        return f"{self.workers} worker(s) × ({self.cpus:g} CPU, {self.gpus:g} GPU)"


def connect() -> None:
    """Connect (or start a local Ray of `local_start`'s resources); this package's code is shipped to the workers by
    value. The workers' output (Ray Train's checkpoint lines, model-loading bars) is not forwarded: the drivers print
    the job's own lines, and a trial's error comes back through Tune."""
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(ray_jobs)
    for name in QUIET_LOGGERS:  # the jobs print their own progress; Ray's detail stays in its session logs
        logging.getLogger(name).setLevel(logging.WARNING)
    # Tune's new console output prints each experiment's configuration and a TensorBoard hint even at verbose=0;
    # the classic one stays silent at verbose=0
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if not ray.is_initialized():
        local = local_start()
        sizes = {"num_cpus": local["CPU"], "num_gpus": local["GPU"]} if local else {}
        ray.init(log_to_driver=False, logging_level=logging.WARNING, **sizes)


def local_start() -> dict[str, int] | None:
    """The resources of the Ray `connect` would start in this process, {"CPU", "GPU"}: the CPUs this process may run
    on and the GPUs it sees (CUDA_VISIBLE_DEVICES, else the driver's list); None when it would connect to a running
    cluster (`RAY_ADDRESS`, or the address file of a `ray start` on this machine, where `ray.init` looks) or is
    connected."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() or os.environ.get("RAY_ADDRESS"):
        return None
    temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    if (Path(temp) / "ray" / "ray_current_cluster").exists():
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = Path("/proc/driver/nvidia/gpus")
    n_gpus = len([d for d in visible.split(",") if d.strip()]) if visible is not None else \
        len(list(gpus.iterdir())) if gpus.is_dir() else 0
    return {"CPU": len(os.sched_getaffinity(0)), "GPU": n_gpus}


def resources() -> tuple[dict[str, float], list[dict[str, float]]]:
    """The cluster's total resources and each live node's: the local Ray's to be started (`local_start`, one node),
    without starting it; else the cluster's, connecting to it."""
    local = local_start()
    if local is not None:
        return dict(local), [dict(local)]
    connect()
    import ray

    return ray.cluster_resources(), [node["Resources"] for node in ray.nodes() if node.get("Alive")]


def resolve_gpus(value: float | str) -> float:
    """GPUs per worker: a number as given; `auto` is 1 when the Ray cluster has GPUs, else 0 (`resources`)."""
    if value != AUTO:
        return float(value)
    return 1.0 if resources()[0].get("GPU", 0.0) > 0 else 0.0


def check_fits(request: WorkerRequest, concurrent: int = 1) -> None:
    """Refuse what cannot run: `concurrent` trainings must fit the cluster at once, and every worker on one node.

    Checking the whole set up front is what rules out a deadlock: no accepted request waits for resources that only
    a finished training could free."""
    total, nodes = resources()
    cpus, gpus = total.get("CPU", 0.0), total.get("GPU", 0.0)
    need_cpus, need_gpus = concurrent * request.total_cpus, concurrent * request.total_gpus
    what = f"{concurrent} concurrent training(s) of {request.describe()}" if concurrent > 1 else request.describe()
    if need_cpus > cpus + 1e-9 or need_gpus > gpus + 1e-9:
        raise JumpLoRAError(f"{what} need {need_cpus:g} CPUs and {need_gpus:g} GPUs, but the Ray cluster has "
                            f"{cpus:g} CPUs and {gpus:g} GPUs: ask for fewer workers, CPUs, GPUs or concurrent trials")
    if not any(n.get("CPU", 0) >= request.cpus and n.get("GPU", 0) >= request.gpus for n in nodes):
        raise JumpLoRAError(f"no node of the Ray cluster has {request.cpus:g} CPUs and {request.gpus:g} GPUs for one "
                            "worker: lower --cpus-per-worker / --gpus-per-worker")


def max_concurrent(request: WorkerRequest) -> int:
    """How many trainings of `request` the cluster holds at once (≥ 1 once `check_fits` passed)."""
    total = resources()[0]
    by_cpu = int(total.get("CPU", 0.0) / request.total_cpus + 1e-9)
    by_gpu = int(total.get("GPU", 0.0) / request.total_gpus + 1e-9) if request.total_gpus else by_cpu
    return max(1, min(by_cpu, by_gpu))


def warn_if_storage_not_shared(storage: Storage) -> None:
    nodes = resources()[1]
    if storage.is_local and len(nodes) > 1:
        print(f"warning: --storage-path {storage.uri} is a local path but the Ray cluster has {len(nodes)} nodes: "
              "every node must see it (a shared file system mounted there) or pass a URI such as s3://bucket/dir",
              file=sys.stderr)
