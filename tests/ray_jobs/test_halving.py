"""The halving search's rule, without a cluster: rung steps, survivors and the planned steps counted by hand, and the
scheduler's decisions for reports that arrive in any order, or partly from an earlier attempt's records."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from ray.tune.schedulers import TrialScheduler

from jumplora.errors import JumpLoRAError
from ray_jobs import halving
from ray_jobs.cluster import WorkerRequest
from ray_jobs.halving import Halving, SynchronousHalving

LAYOUT = Halving((1 / 9, 1 / 3), 3, 32)


def test_rungs_are_rounded_steps_inside_the_task():
    assert LAYOUT.rung_steps(64) == (7, 21)  # round(7.1), round(21.3)
    assert LAYOUT.rung_steps(3) == (1,)  # round(0.33) → 1 (at least one step), round(1.0) = 1 once
    assert Halving((0.9,), 2, 1).rung_steps(10) == (9,)
    assert Halving((0.99,), 2, 1).rung_steps(10) == (9,)  # never the last step: the end compares that
    assert LAYOUT.alive(6, 2) == [6, 2, 1] and LAYOUT.alive(3, 1) == [3, 1] and Halving((0.5,), 2, 1).alive(5, 1) == [
        5, 3]


def test_planned_steps_of_each_trial():
    # 6 λ, 64 steps: 4 cut at step 7, one at step 21, one to the end: 113 steps instead of the grid's 384
    assert halving.planned_steps(6, 64, LAYOUT) == [64, 21, 7, 7, 7, 7]
    assert halving.planned_steps(3, 3, LAYOUT) == [3, 1, 1]


def test_survivors_are_the_best_and_ties_go_on_from_both_ends_of_their_lambda_range():
    lambdas = {"a": 1.0, "b": 10.0, "c": 100.0, "d": 1000.0, "e": 1e4, "f": 1e5}
    assert halving.survivors({"a": 0.5, "b": 0.7, "c": 0.7, "d": 0.9}, 2, lambdas) == {"d", "b"}
    assert halving.survivors({"a": 0.5, "b": 0.5, "c": 0.5}, 1, lambdas) == {"a"}
    tied = dict.fromkeys(lambdas, 0.75)  # early in a task every λ scores the same
    assert halving.survivors(tied, 2, lambdas) == {"a", "f"}
    assert halving.survivors(tied, 3, lambdas) == {"a", "f", "b"}
    # the best alone, then the ends of the four tied below it
    assert halving.survivors({**tied, "c": 0.8, "e": 0.7}, 3, lambdas) == {"c", "a", "f"}


@dataclass
class FakeTrial:
    name: str
    last_result: dict = field(default_factory=dict)

    @property
    def config(self) -> dict:
        return {"trial": self.name}


class FakeController:
    """What the scheduler calls on Tune's controller: the trials it lets go on and the ones it stops."""

    def __init__(self) -> None:
        self.went_on, self.stopped = [], []

    def _schedule_trial_train(self, trial) -> None:
        self.went_on.append(trial.name)

    def stop_trial(self, trial) -> None:
        self.stopped.append(trial.name)


def rung(k: int, *means: float) -> dict:
    return {"rung": k, "rung_dev": list(means)}


LAMBDAS = {"lam1": 1.0, "lam10": 10.0, "lam100": 100.0, "lam1000": 1000.0, "lam1e4": 1e4, "lam1e5": 1e5}


def test_trials_wait_at_a_rung_until_all_reported_then_the_best_third_go_on():
    scheduler, controller = SynchronousHalving(LAYOUT, 2, LAMBDAS, known={}), FakeController()
    trials = {name: FakeTrial(name) for name in LAMBDAS}
    means = {"lam1": 0.4, "lam10": 0.6, "lam100": 0.6, "lam1000": 0.5, "lam1e4": 0.3, "lam1e5": 0.1}
    arrival = ["lam1e5", "lam100", "lam1", "lam1e4", "lam1000"]
    for name in arrival:
        assert scheduler.on_trial_result(controller, trials[name], rung(1, means[name])) == TrialScheduler.NOOP
    # the last to arrive decides: ⌈6/3⌉ = 2 go on, lam10 and lam100 (the best two), the others stop
    assert scheduler.on_trial_result(controller, trials["lam10"], rung(1, means["lam10"])) == TrialScheduler.CONTINUE
    assert controller.went_on == ["lam100"]
    assert sorted(controller.stopped) == ["lam1", "lam1000", "lam1e4", "lam1e5"]
    # rung 2: ⌈2/3⌉ = 1; lam100 wins; the trial that decides is the one stopped this time
    assert scheduler.on_trial_result(controller, trials["lam100"], rung(2, 0.6, 0.8)) == TrialScheduler.NOOP
    assert scheduler.on_trial_result(controller, trials["lam10"], rung(2, 0.6, 0.7)) == TrialScheduler.STOP
    assert controller.went_on == ["lam100", "lam100"]
    assert scheduler.cut == {"lam1", "lam1000", "lam1e4", "lam1e5", "lam10"}
    assert scheduler.on_trial_result(controller, trials["lam100"], {"dev_mean": 0.8}) == TrialScheduler.CONTINUE
    trials["lam100"].last_result = {"dev_mean": 0.8}
    trials["lam10"].last_result = rung(2, 0.6, 0.7)
    assert scheduler.ended_well(trials["lam100"]) and scheduler.ended_well(trials["lam10"])


def test_an_earlier_attempts_records_decide_with_the_trials_run_again():
    """lam1 and lam10 finished (or were cut) before; the others run again and decide as the first attempt did."""
    known = {"lam1": [0.4], "lam10": [0.6, 0.7]}
    scheduler, controller = SynchronousHalving(LAYOUT, 2, LAMBDAS, known), FakeController()
    trials = {name: FakeTrial(name) for name in LAMBDAS}
    for name, mean in (("lam1e5", 0.1), ("lam1000", 0.5), ("lam1e4", 0.3)):
        assert scheduler.on_trial_result(controller, trials[name], rung(1, mean)) == TrialScheduler.NOOP
    assert scheduler.on_trial_result(controller, trials["lam100"], rung(1, 0.6)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(controller, trials["lam100"], rung(2, 0.6, 0.8)) == TrialScheduler.CONTINUE
    assert scheduler.cut == {"lam1e5", "lam1000", "lam1e4"}
    # a trial stopped because another failed for good is not recorded as cut: it runs again on resubmission
    waiting = FakeTrial("lam1e5", rung(1, 0.1))
    other = SynchronousHalving(LAYOUT, 2, LAMBDAS, known={})
    assert other.on_trial_result(controller, waiting, rung(1, 0.1)) == TrialScheduler.NOOP
    other.on_trial_error(controller, FakeTrial("lam1"))
    assert controller.stopped[-1] == "lam1e5" and not other.ended_well(waiting)


def test_halving_needs_every_trial_of_a_stage_at_once_in_one_process():
    one = WorkerRequest(workers=1, cpus=1.0, gpus=0.0, driver_cpus=0.0)
    LAYOUT.check_fits(6, 6, one)
    with pytest.raises(JumpLoRAError, match="trains a stage's 6 λ at once .* only 2 trial"):
        LAYOUT.check_fits(6, 2, one)
    with pytest.raises(JumpLoRAError, match="--workers-per-trial 1"):
        LAYOUT.check_fits(6, 6, WorkerRequest(workers=2, cpus=1.0, gpus=0.0, driver_cpus=0.01))


def test_rungs_that_fall_on_one_step_are_merged_and_said():
    assert LAYOUT.notes(64) is None  # steps 7 and 21
    assert LAYOUT.notes(3) == "rungs 0.111111 and 0.333333 fall on step 1 of 3: compared there once"
    assert Halving((0.2, 0.25, 0.5, 0.54), 2, 1).notes(10) == (
        "rungs 0.2 and 0.25 fall on step 2 of 10; rungs 0.5 and 0.54 fall on step 5 of 10: compared there once")
    assert Halving((0.5,), 2, 1).notes(1) == "a task of 1 optimizer step(s) has no rung: its λ all train to the end"
    assert len(Halving((0.2, 0.25, 0.5, 0.54), 2, 1).rung_steps(10)) == 2  # as planned: two rungs
