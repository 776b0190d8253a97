"""`train_sequence.py`: one continual run (order, method, seed, λ per task) on Ray Train V2: a `TorchTrainer` whose
`worker.train_fn_per_worker` runs the library's loop data-parallel, a checkpoint after every task (from which
`FailureConfig` restarts a failed worker group and the same `--name` resumes), then the run directory
`<storage>/<name>/run/`; a rerun of a finished run trains nothing."""

from __future__ import annotations

import argparse

from jumplora import tracking
from jumplora.outputs import RESULTS, format_summary
from jumplora.storage import RUN_DIR, SEQUENCE, Storage
from jumplora.tracking import folders
from ray_jobs import cli, cluster, jobs, worker

CHECKPOINTS_KEPT = 2


def main(args: argparse.Namespace) -> int:
    config = jobs.with_lambdas(cli.run_config(args, "sequence"))
    tasks = jobs.check(config, args.num_workers)
    job = jobs.Job(config, cli.cache_dir(args))
    tracker = tracking.from_args(args)
    storage = Storage(args.storage_path)
    storage.check_writable()
    name = args.name or f"order{config.order}-{config.method}-{args.preset}-seed{config.seed}"
    job_folder = storage.job(name, SEQUENCE, cli.cache_dir(args), job.identity())
    gpus = cluster.resolve_gpus(cluster.AUTO if args.use_gpu is None else float(args.use_gpu))
    request = cluster.WorkerRequest(workers=args.num_workers, cpus=args.cpus_per_worker, gpus=gpus)
    cluster.check_fits(request)  # before Ray starts (`cluster.resources`)
    with job_folder.held() as folder:
        run_sequence(args, job, len(tasks), request, storage, folder, name)
        folders.log_sequence(tracker, folder, name)
    print(format_summary(folder.child(RUN_DIR).read_results()), end="")
    print(f"run directory: {folder.uri}/{RUN_DIR}")
    return 0


def run_sequence(args: argparse.Namespace, job: jobs.Job, n_tasks: int, request: cluster.WorkerRequest,
                 storage: Storage, folder: Storage, name: str) -> None:
    """Train the run into `folder` (resuming from its checkpoints), unless it holds a finished run."""
    cluster.connect()
    cluster.warn_if_storage_not_shared(storage)
    jobs.build_base(job)
    jobs.claim(folder, job)
    if folder.exists(f"{RUN_DIR}/{RESULTS}"):
        print(f"{folder.uri} holds a finished run: nothing to train")
        return
    trial = jobs.Trial(name, job, jobs.Sequence(n_tasks, publish=folder.uri))
    try:
        worker.trainer(trial, None, request, trial.id, storage.uri, args.max_failures, CHECKPOINTS_KEPT).fit()
    except SystemExit as stop:  # Ray Train's SIGINT handler aborts the run, then exits from within `fit`
        raise KeyboardInterrupt from stop
