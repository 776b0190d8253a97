"""`grid_lambda.py --search halving`: successive halving inside a stage of the λ grid, decided by a Ray Tune scheduler
of our own (`SynchronousHalving`); the rule, and why not Tune's ASHA or HyperBand: docs/DECISIONS.md, "λ search by
successive halving"."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from jumplora import selection, spaces
from jumplora.errors import JumpLoRAError
from jumplora.steps import steps_per_epoch
from ray_jobs.cluster import WorkerRequest
from ray_jobs.costs import Cost, Split
from ray_jobs.jobs import RUNG, RUNG_DEV, Rungs
from ray_jobs.search import Grid


@dataclass(frozen=True)
class Halving(Grid):
    """The search (`search.Search`) and its layout: rung fractions of a task's optimizer steps, η, and the dev
    examples of a seen task at a rung. Stage 1 (task 1 alone, λ = 0) is the grid's."""

    fractions: tuple[float, ...]
    eta: int
    examples: int
    name = "halving"
    title = "search by successive halving"

    @classmethod
    def from_dict(cls, data: dict, rule: str = selection.BEST) -> Halving:
        """From its `search_spaces/halving.yaml` layout (`spaces.check_halving`): {"rungs", "eta", "rung_examples"}."""
        return cls(tuple(data["rungs"]), data["eta"], data["rung_examples"], rule=rule)

    @classmethod
    def from_args(cls, args) -> Halving:
        """`--search halving` (`searches.SearchSpec.build`): search_spaces/halving.yaml's layout, then --rungs /
        --eta / --rung-examples, and `--select`'s rule."""
        given = {"rungs": args.rungs, "eta": args.eta, "rung_examples": args.rung_examples}
        layout = {**spaces.halving(), **{key: value for key, value in given.items() if value is not None}}
        return cls.from_dict(spaces.check_halving(layout["rungs"], layout["eta"], layout["rung_examples"],
                                                  "--search halving:"), args.select)

    def identity(self) -> dict:
        layout = {"rungs": list(self.fractions), "eta": self.eta, "rung_examples": self.examples}  # as halving.yaml's
        return {"search": {"halving": layout}, **super().identity()}

    def one_lambda_only(self) -> str | None:
        return "a halving search trains one λ per trial"

    def check_fits(self, n_lambdas: int, concurrent: int, request: WorkerRequest) -> None:
        """Every trial of a stage waits at a rung for all the others: they must all run at once."""
        if request.workers > 1:
            raise JumpLoRAError("--search halving reads the rungs in one-process trials: use --workers-per-trial 1 "
                                "(or --search grid)")
        if concurrent < n_lambdas:
            raise JumpLoRAError(f"--search halving trains a stage's {n_lambdas} λ at once (they wait for each other "
                                f"at each rung), but only {concurrent} trial(s) of {request.describe()} run at once: "
                                "lower --cpus-per-worker / --gpus-per-worker (or raise --max-concurrent) so that "
                                f"{n_lambdas} fit, or use --search grid")

    @classmethod
    def default(cls) -> Halving:
        return cls.from_dict(spaces.halving())

    def rung_steps(self, total: int) -> tuple[int, ...]:
        """The optimizer steps after which a task of `total` steps is compared: round(f · total) for each fraction,
        kept within 1..total − 1 (a rung at the last step would compare what the end compares), duplicates once."""
        return tuple(sorted({min(total - 1, max(1, round(f * total))) for f in self.fractions})) if total > 1 else ()

    def notes(self, total: int) -> str | None:
        """What `rung_steps` merges on a task of `total` steps, said (rungs that fall on one step are compared there
        once; a task too short for any rung is not cut), or None when every fraction has its own step."""
        if total <= 1:
            return f"a task of {total} optimizer step(s) has no rung: its λ all train to the end"
        steps = {}
        for fraction in self.fractions:
            steps.setdefault(min(total - 1, max(1, round(fraction * total))), []).append(fraction)
        shared = [f"rungs {' and '.join(f'{f:g}' for f in fractions)} fall on step {step} of {total}"
                  for step, fractions in steps.items() if len(fractions) > 1]
        return f"{'; '.join(shared)}: compared there once" if shared else None

    def rungs(self, index: int, total: int) -> Rungs | None:
        return Rungs(self.rung_steps(total), self.examples) if index > 0 else None

    def scheduler(self, rungs: Rungs | None, lambdas: dict[str, float]):
        """`SynchronousHalving` of a stage whose trials have ids → λ `lambdas`, from the rung means of the trials an
        earlier attempt recorded; None for a stage without rungs."""
        if rungs is None or not rungs.steps:
            return None
        return lambda recorded: SynchronousHalving(self, len(rungs.steps), lambdas, {
            trial_id: result.metrics.get(RUNG_DEV, []) for trial_id, result in recorded.items()})

    def stage_cost(self, index: int, n_lambdas: int, baselines: tuple[int, ...], tasks: tuple[str, ...],
                   sizes: dict[str, dict[str, Split]], test_all: bool, batch_size: int) -> Cost:
        """Stage `index` ≥ 1: a trial cut at rung r_k runs r_k steps and has trained the examples of those steps;
        every trial evaluates the rung subset of the seen dev sets at each rung it reaches, only those that reach the
        end the full dev sets; the chosen trial's test row once. Source tokens are not counted (None)."""
        if index == 0:
            return super().stage_cost(index, n_lambdas, baselines, tasks, sizes, test_all, batch_size)
        seen, n_train = tasks[: index + 1], sizes[tasks[index]]["train"].examples
        total = steps_per_epoch(n_train, batch_size)
        alive = self.alive(n_lambdas, len(self.rung_steps(total)))
        full_dev = sum(sizes[t]["dev"].examples for t in seen)
        rung_dev = sum(min(self.examples, sizes[t]["dev"].examples) for t in seen)
        steps = planned_steps(n_lambdas, total, self)
        return Cost(trainings=n_lambdas, train_examples=sum(min(s * batch_size, n_train) for s in steps),
                    dev_examples=sum(alive[:-1]) * rung_dev + alive[-1] * full_dev,
                    test_examples=sum(sizes[t]["test"].examples for t in seen), train_tokens=None,
                    eval_tokens=None, steps=sum(steps))

    def alive(self, n: int, rungs: int) -> list[int]:
        """Trials training up to each rung and after the last: n, ⌈n/η⌉, ⌈n/η²⌉, ... (`rungs` + 1 numbers)."""
        counts = [n]
        for _ in range(rungs):
            counts.append(math.ceil(counts[-1] / self.eta))
        return counts

    def describe(self) -> str:
        at = ", ".join(f"{f:g}" for f in self.fractions)
        return (f"rungs at {at} of a task's optimizer steps, the best 1/{self.eta} go on at each, "
                f"{self.examples} dev examples of each seen task at a rung")


def planned_steps(n: int, total: int, halving: Halving) -> list[int]:
    """The optimizer steps each of the `n` trials of a stage runs (best first): all `total` for the survivors, the step
    of the rung where it is cut for the others."""
    steps = halving.rung_steps(total)
    alive = halving.alive(n, len(steps))
    return [total] * alive[-1] + [r for k, r in enumerate(steps) for _ in range(alive[k] - alive[k + 1])][::-1]


def survivors(scores: dict[str, float], keep: int, lambdas: dict[str, float]) -> set[str]:
    """The `keep` trials of the highest score. Trials tied at the cut go on from both ends of their λ range inward
    (the smallest, the largest, the second smallest, ...): early in a task every λ trains alike (ΔW ≈ 0, so λ·P
    pulls on nothing yet) and a rung there ties them all; the grid's tie rule, the smaller λ, would then always keep
    the smallest λ, whatever the end of the task shows (docs/DECISIONS.md)."""
    ranked = []
    for score in sorted(set(scores.values()), reverse=True):
        tied = sorted((trial for trial in scores if scores[trial] == score), key=lambda trial: lambdas[trial])
        while tied:
            ranked.append(tied.pop(0))
            if tied:
                ranked.append(tied.pop())
    return set(ranked[:keep])


class SynchronousHalving(FIFOScheduler):
    """Tune scheduler of one stage: `lambdas` maps each trial id to its λ, `rungs` is the number of rungs, `known` the
    rung dev means of the trials recorded as finished or cut by an earlier attempt of the stage."""

    def __init__(self, halving: Halving, rungs: int, lambdas: dict[str, float], known: dict[str, list[float]]):
        super().__init__()
        self.lambdas = lambdas
        self.keep = halving.alive(len(lambdas), rungs)[1:]
        self.scores = [{trial: means[k] for trial, means in known.items() if k < len(means)} for k in range(rungs)]
        self.waiting: dict[str, object] = {}  # trial id → Tune trial waiting at the current rung
        self.cut: set[str] = set()

    def going_on(self, k: int) -> set[str] | None:
        """The trials that go on past rung k (0-based), or None while one that trains up to it has not reported."""
        alive = set(self.lambdas)
        for j in range(k + 1):
            if not alive <= self.scores[j].keys():
                return None
            alive = survivors({trial: self.scores[j][trial] for trial in alive}, self.keep[j], self.lambdas)
        return alive

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if RUNG not in result:
            return TrialScheduler.CONTINUE
        k, me = int(result[RUNG]) - 1, trial.config["trial"]
        self.scores[k][me] = float(result[RUNG_DEV][-1])
        going_on = self.going_on(k)
        if going_on is None:  # wait: the report is answered once every trial of the rung is in
            self.waiting[me] = trial
            return TrialScheduler.NOOP
        waiting, self.waiting = self.waiting, {}
        for other_id, other in waiting.items():
            if other_id in going_on:
                go_on(tune_controller, other)
            else:
                self.cut.add(other_id)
                tune_controller.stop_trial(other)
        if me in going_on:
            return TrialScheduler.CONTINUE
        self.cut.add(me)
        return TrialScheduler.STOP

    def on_trial_error(self, tune_controller, trial) -> None:
        """A trial that failed for good never reports again: the waiting ones are stopped (not recorded as cut, so a
        resubmitted stage runs them again), and the stage fails."""
        waiting, self.waiting = self.waiting, {}
        for other in waiting.values():
            tune_controller.stop_trial(other)
        super().on_trial_error(tune_controller, trial)

    def ended_well(self, trial) -> bool:
        """A trial to record as finished: it trained to the end of its task, or the rule cut it at a rung."""
        return RUNG not in trial.last_result or trial.config["trial"] in self.cut


def go_on(tune_controller, trial) -> None:
    """Answer the report of a trial waiting at a rung, as Tune does after a CONTINUE decision (its next `train` call).
    Tune's scheduler interface decides for the trial whose result it handles and can stop or pause others, but has no
    call to let another one go on without pausing it (a checkpoint-restore): the controller's own method is used."""
    controller = getattr(tune_controller, "_tune_controller", tune_controller)  # Tune hands schedulers a wrapper
    controller._schedule_trial_train(trial)
