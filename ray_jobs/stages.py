"""A λ grid's stages (`Stage`, `plan`) and how their λ are packed into trials: one λ per trial, or several trained
as one stack in one process (`--lambdas-per-trial`; `pack`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from jumplora.methods import stacks
from jumplora.storage import Storage
from ray_jobs import cluster, jobs
from ray_jobs.cluster import AUTO
from ray_jobs.search import Search


@dataclass(frozen=True)
class Stage:
    """Task `index` (0-based) trained with each λ of `lambdas`, plus single-task baselines of tasks `baselines`."""

    index: int
    task: str
    lambdas: tuple[float, ...]
    baselines: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return f"task{self.index + 1:02d}"

    def lambda_id(self, lam: float) -> str:
        """λ's result id in this stage (its record in `trials.FINISHED`, its checkpoint folder)."""
        return f"{self.name}-lam{lam:g}"

    @staticmethod
    def baseline_id(j: int) -> str:
        """The result id of task j's (0-based) single-task baseline."""
        return f"a0-task{j + 1:02d}"


def plan(tasks: tuple[str, ...], grid: list[float]) -> list[Stage]:
    first = Stage(0, tasks[0], (0.0,), tuple(range(1, len(tasks))))
    return [first] + [Stage(t, tasks[t], tuple(grid)) for t in range(1, len(tasks))]


def lambdas_per_trial(setting: int | str, n: int, request, one_only: bool, slots: int = 1) -> int:
    """λ per trial of a stage of `n` λ: `setting`, at most n; `auto`: on a CPU the n λ spread over the `slots`
    trials the cluster runs at once, ⌈n / slots⌉ each (the fewest processes that keep every slot busy: a CPU step is
    compute-bound, so a stack gains the set-up it pays once, not speed), one on a GPU (a stack's peak memory is not
    calibrated yet, see DECISIONS). One when `one_only` (`one_lambda_only`)."""
    if one_only:
        return 1
    if setting == AUTO:
        return 1 if request.gpus else -(-n // max(1, min(slots, n)))
    return min(setting, n)


def one_lambda_only(method: str, search: Search, test_all: bool) -> str | None:
    """Why a grid trains one λ per trial, or None: the search needs it (`Search.one_lambda_only`); a group trains its
    λ to the end and evaluates dev only, and saves each λ's checkpoint from its records (a method that trains every
    weight would need each λ's whole model)."""
    if search.one_lambda_only():
        return search.one_lambda_only()
    if test_all:
        return "--test-all-trials trains one λ per trial"
    if not stacks(method):
        return f"{method} trains every weight: one λ per trial"
    return None


def trials_at_once(max_concurrent: int | None, stages: list[Stage], request) -> int:
    """How many trials run at once: `--max-concurrent`, else as many of the widest stage's (more would never run) as
    the Ray cluster holds (the local Ray's to be started, `cluster.resources`: a plan starts none). The run and its
    plan both count with it: `auto` packs a stage's λ by it (`stage_packing`)."""
    widest = max(len(stage.lambdas) + len(stage.baselines) for stage in stages)
    return max_concurrent or min(widest, cluster.max_concurrent(request))


def stage_packing(setting: int | str, stages: list[Stage], request, only_one: str | None,
                  concurrent: int) -> list[int]:
    """λ per trial of each stage (`lambdas_per_trial`) with `concurrent` trials at once (`trials_at_once`);
    `only_one`: `one_lambda_only`'s reason. The run packs by it and its plan prints it."""
    return [lambdas_per_trial(setting, len(stage.lambdas), request, only_one is not None, concurrent)
            for stage in stages]


def pack(stage: Stage, job: jobs.Job, per_trial: int, finished: Collection[str], folder: Storage, test: bool = False,
         rungs: jobs.Rungs | None = None) -> list[jobs.Trial]:
    """The stage's trials: its λ as `jobs.LambdaGroup`s (test sets evaluated only if `test`; compared at `rungs` by a
    search), those not `finished` yet `per_trial` to a trial in grid order, each finished one a group of its own
    (skipped by `trials.run_trials`, which reads its record), with each group's λ checkpoints in its trial folder under
    `folder`; and the single-task baselines. A group of one is named by its λ's id."""

    def group(lams: tuple[float, ...]) -> jobs.Trial:
        ids = tuple(map(stage.lambda_id, lams))
        trial_id = ids[0] if len(lams) == 1 else f"{stage.name}-lams-{'-'.join(f'{lam:g}' for lam in lams)}"
        return jobs.Trial(trial_id, job, jobs.LambdaGroup(stage.index, lams, ids, folder.child(trial_id).uri, test,
                                                          rungs))

    todo = [lam for lam in stage.lambdas if stage.lambda_id(lam) not in finished]
    done = [group((lam,)) for lam in stage.lambdas if lam not in todo]
    baselines = [jobs.Trial(stage.baseline_id(j), job, jobs.SingleTask(j)) for j in stage.baselines]
    packed = [group(tuple(todo[first: first + per_trial])) for first in range(0, len(todo), per_trial)]
    return done + baselines + packed
