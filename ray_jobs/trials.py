"""Running trials (`jobs.Trial`: a unit of work of a job, see `worker`) as concurrent Ray Tune trials, each on one
process or on a TorchTrainer.

With one worker per trial the trial itself trains (a plain function trainable: cheap). With more, the trial only
drives a `TorchTrainer` (Ray Train V2) and holds `TRIAL_DRIVER_CPUS`; its workers are placed by the trainer."""

from __future__ import annotations

import ray.train
from ray import tune
from ray.train.torch import TorchTrainer

from ray_jobs import worker
from ray_jobs.cluster import WorkerRequest
from ray_jobs.jobs import Trial
from ray_jobs.storage import Storage

TRIAL_RETRIES = 2  # a trial that dies starts again from its last checkpoint (or from its start)


def torch_trial(config: dict, trials: dict[str, Trial], scaling: dict, storage_uri: str, start=None) -> None:
    """Tune trial that trains on a TorchTrainer and reports the trainer's last metrics and checkpoint path."""
    name = tune.get_context().get_trial_name()
    trainer = TorchTrainer(
        worker.train_fn_per_worker,
        train_loop_config={"trial": trials[config["trial"]], "start": start},
        scaling_config=ray.train.ScalingConfig(**scaling),
        run_config=ray.train.RunConfig(name=name, storage_path=f"{storage_uri}/train",
                                       failure_config=ray.train.FailureConfig(max_failures=TRIAL_RETRIES)),
    )
    result = trainer.fit()
    checkpoint_path = result.checkpoint.path if result.checkpoint else None
    tune.report({**result.metrics, "checkpoint_path": checkpoint_path})


def trainable(request: WorkerRequest, folder: Storage, trials: dict[str, Trial], start):
    """The Tune trainable for `request`; a trial's config is its id in `trials`, every trial starts from `start`."""
    if request.workers == 1:
        resources = {"cpu": request.cpus, "gpu": request.gpus}
        return tune.with_resources(tune.with_parameters(worker.tune_trial, trials=trials, start=start), resources)
    scaling = {"num_workers": request.workers, "use_gpu": request.gpus > 0,
               "resources_per_worker": {"CPU": request.cpus, **({"GPU": request.gpus} if request.gpus else {})}}
    function = tune.with_parameters(torch_trial, trials=trials, scaling=scaling, storage_uri=folder.uri, start=start)
    return tune.with_resources(function, {"cpu": request.driver_cpus})


def checkpoint_of(result) -> str | None:
    """Path (in the storage's file system) of a trial's last checkpoint, whichever kind of trial it was."""
    if result.checkpoint is not None:
        return result.checkpoint.path
    return result.metrics.get("checkpoint_path")


def run_trials(name: str, trials: list[Trial], request: WorkerRequest, concurrent: int, folder: Storage,
               start=None) -> dict[str, object]:
    """One Tune experiment `folder/name` with a Tune trial per `trials` entry; raises if any trial failed. Returns
    each trial's Tune result by trial id."""
    by_id = {trial.id: trial for trial in trials}
    tuner = tune.Tuner(
        trainable(request, folder, by_id, start),
        param_space={"trial": tune.grid_search(list(by_id))},
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrent, reuse_actors=request.workers == 1,
                                    trial_dirname_creator=lambda trial: trial.config["trial"]),
        run_config=tune.RunConfig(name=name, storage_path=folder.uri, verbose=0,  # the drivers print progress
                                  failure_config=tune.FailureConfig(max_failures=TRIAL_RETRIES)),
    )
    results = tuner.fit()
    if results.errors:
        raise RuntimeError(f"{len(results.errors)} trial(s) of {folder.uri}/{name} failed; first: {results.errors[0]}")
    return {result.config["trial"]: result for result in results}
