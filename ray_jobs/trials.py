"""Running trials (`jobs.Trial`, see `worker`) as concurrent Ray Tune trials; each that ends well is recorded at once
in `<experiment>/finished/`, so a driver started again trains only the others (ray_jobs/README.md)."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from ray import tune
from ray.tune.schedulers import TrialScheduler

from jumplora.storage import Storage
from ray_jobs.cluster import WorkerRequest
from ray_jobs.jobs import GROUP, Trial

TRIAL_RETRIES = 2  # a trial that dies starts again from its last checkpoint (or from its start)
FINISHED = "finished"


@dataclass(frozen=True)
class TrialResult:
    """What a finished trial left: its last reported metrics and its last checkpoint (a path in the storage's file
    system, None when it reported none)."""

    metrics: dict
    checkpoint: str | None


class RecordFinished(tune.Callback):
    """Writes a trial's `TrialResult` to `folder/<trial id>.json` as soon as the trial ends well (on the driver); with
    a `scheduler` that stops trials, only those it says ended well (`SynchronousHalving.ended_well`)."""

    def __init__(self, folder: Storage, scheduler=None) -> None:
        self.folder, self.scheduler = folder, scheduler

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        """A λ group's one report: a record per λ, at once (the group may yet fail on a λ that diverged)."""
        for lam_id, member in result.get(GROUP, {}).items():
            self.folder.write_json(f"{lam_id}.json", dataclasses.asdict(TrialResult(**member)))

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        if GROUP in trial.last_result or self.scheduler is not None and not self.scheduler.ended_well(trial):
            return
        metrics = {key: value for key, value in trial.last_result.items()  # what JSON holds: numbers, number lists
                   if isinstance(value, str | int | float | bool | None)
                   or isinstance(value, list) and all(isinstance(v, int | float) for v in value)}
        checkpoint = trial.checkpoint.path if trial.checkpoint is not None else metrics.get("checkpoint_path")
        self.folder.write_json(f"{trial.config['trial']}.json", dataclasses.asdict(TrialResult(metrics, checkpoint)))


def tune_trial(config: dict, trials: dict[str, Trial], start=None) -> None:
    """A one-process trial, `config["trial"]` its id in `trials`; the worker and torch imported in the trial's process:
    the driver hands Tune this function and loads neither."""
    from ray_jobs import worker

    worker.run_trial(trials[config["trial"]], start, worker.Session(tune))


def torch_trial(config: dict, trials: dict[str, Trial], request: WorkerRequest, storage_uri: str, start=None) -> None:
    """Tune trial that trains on a TorchTrainer and reports the trainer's last metrics and checkpoint path."""
    from ray_jobs import worker  # torch: imported where the trial runs

    name = tune.get_context().get_trial_name()
    result = worker.trainer(trials[config["trial"]], start, request, name, f"{storage_uri}/train", TRIAL_RETRIES).fit()
    checkpoint_path = result.checkpoint.path if result.checkpoint else None
    tune.report({**result.metrics, "checkpoint_path": checkpoint_path})


def trainable(request: WorkerRequest, folder: Storage, trials: dict[str, Trial], start):
    """The Tune trainable for `request`; a trial's config is its id in `trials`, every trial starts from `start`."""
    if request.workers == 1:
        resources = {"cpu": request.cpus, "gpu": request.gpus}
        return tune.with_resources(tune.with_parameters(tune_trial, trials=trials, start=start), resources)
    function = tune.with_parameters(torch_trial, trials=trials, request=request, storage_uri=folder.uri, start=start)
    return tune.with_resources(function, {"cpu": request.driver_cpus})


def run_trials(name: str, trials: list[Trial], request: WorkerRequest, concurrent: int, folder: Storage,
               start=None, scheduler: Callable[[dict[str, TrialResult]], TrialScheduler] | None = None,
               ) -> dict[str, TrialResult]:
    """One Tune experiment `folder/name` with a Tune trial per `trials` entry that has not finished yet (a λ group:
    one of its λ has no record); raises if any trial failed. Returns every result by its id (`Trial.results`).
    `scheduler`: made from the results recorded before (a λ search decides from them too); without it every trial
    runs to its end."""
    results = recorded(folder, name, [result_id for trial in trials for result_id in trial.results])
    missing = {trial.id: trial for trial in trials if any(result_id not in results for result_id in trial.results)}
    if results:
        print(f"{name}: {len(results)} trial(s) finished before, {len(missing)} to run", flush=True)
    if not missing:
        return results
    # an unfinished trial starts again in a folder of its own: what an interrupted attempt left there is Ray's, kept
    dirs = {trial_id: f"{trial_id}-{secrets.token_hex(3)}" if folder.child(name).exists(trial_id) else trial_id
            for trial_id in missing}
    chosen = scheduler(results) if scheduler is not None else None
    tuner = tune.Tuner(
        trainable(request, folder, missing, start),
        param_space={"trial": tune.grid_search(list(missing))},
        tune_config=tune.TuneConfig(max_concurrent_trials=min(concurrent, len(missing)), scheduler=chosen,
                                    # a stopped trial's process is ended, not handed to another trial
                                    reuse_actors=request.workers == 1 and chosen is None,
                                    trial_dirname_creator=lambda trial: dirs[trial.config["trial"]]),
        run_config=tune.RunConfig(name=name, storage_path=folder.uri, verbose=0,  # the drivers print progress
                                  failure_config=tune.FailureConfig(max_failures=TRIAL_RETRIES),
                                  callbacks=[RecordFinished(folder.child(name).child(FINISHED), chosen)]),
    )
    grid = tuner.fit()
    if grid.errors:
        raise RuntimeError(f"{len(grid.errors)} trial(s) of {folder.uri}/{name} failed; first: {grid.errors[0]}") \
            from grid.errors[0]
    ran = [result_id for trial in missing.values() for result_id in trial.results]
    finished = recorded(folder, name, ran)
    if len(finished) < len(ran):  # Tune ends `fit` early, without an error, when the driver gets SIGINT
        raise KeyboardInterrupt(f"{name}: {len(ran) - len(finished)} trial(s) did not finish")
    return results | finished


def recorded(folder: Storage, name: str, result_ids: list[str]) -> dict[str, TrialResult]:
    """The results of those of `result_ids` that experiment `folder/name` has recorded as finished, by id."""
    records = folder.child(name).child(FINISHED)
    found = {}
    for result_id in result_ids:  # one read each, not a lookup then a read (two round trips on an object store)
        try:
            found[result_id] = TrialResult(**records.read_json(f"{result_id}.json"))
        except FileNotFoundError:
            continue
    return found

