"""The λ search of a grid's stages: the protocol the driver (`ray_jobs.grid`) asks (`Search`), each declared by name
in `searches` (the built-in two, a plugin's); `Grid`, every λ trains the whole task and is compared at its end, and
`halving.Halving`, compared at rungs part-way and most stopped there. Every search keeps the λ of `--select`'s rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from jumplora import guidance, selection
from jumplora.results import TrialRecord
from jumplora.storage import SELECT
from ray_jobs import costs
from ray_jobs.jobs import Rungs


class Search(Protocol):
    name: str  # --search's word, a stage record's `search`
    title: str  # what the plan calls it
    rule: str  # --select: `selection.RULES`

    def stage_cost(self, index: int, n_lambdas: int, baselines: tuple[int, ...], tasks: tuple[str, ...],
                   sizes: dict[str, dict[str, costs.Split]], test_all: bool, batch_size: int) -> costs.Cost:
        """What stage `index` (0-based) trains and evaluates, counted before it runs."""

    def one_lambda_only(self) -> str | None:
        """Why the search needs a trial per λ (a process of its own that it can stop), or None."""

    def check_fits(self, n_lambdas: int, concurrent: int, request) -> None:
        """Refuses a cluster on which its stages of up to `n_lambdas` λ would not run as it needs."""

    def rungs(self, index: int, total: int) -> Rungs | None:
        """When the λ trials of stage `index`, a task of `total` optimizer steps, are compared before its end."""

    def notes(self, total: int) -> str | None:
        """What a plan should say of a stage of `total` steps, or None."""

    def scheduler(self, rungs: Rungs | None, lambdas: dict[str, float]) -> Callable[[dict], object] | None:
        """The Tune scheduler's maker (from the results an earlier attempt recorded) that stops trials, or None."""

    def identity(self) -> dict:
        """What a grid folder's identity adds for this search (empty for the plain grid chosen by `best`)."""

    def choose(self, trials: list[TrialRecord]) -> TrialRecord:
        """The trial whose λ the stage keeps."""

    def describe(self) -> str:
        """Its layout in words, for a plan."""


@dataclass(frozen=True)
class Grid:
    """The plain grid: each λ of a stage trains its whole task, all compared at its end."""

    rule: str = field(default=selection.BEST, kw_only=True)
    name = "grid"
    title = "grid"

    @classmethod
    def from_args(cls, args) -> Grid:
        """`--search grid` (`searches.SearchSpec.build`): the grid chosen by `--select`'s rule."""
        return cls(rule=args.select)

    def stage_cost(self, index, n_lambdas, baselines, tasks, sizes, test_all, batch_size) -> costs.Cost:
        return costs.stage_cost(index, n_lambdas, baselines, tasks, sizes, test_all, batch_size)

    def one_lambda_only(self) -> str | None:
        return None

    def check_fits(self, n_lambdas: int, concurrent: int, request) -> None:
        return None

    def rungs(self, index: int, total: int) -> Rungs | None:
        return None

    def notes(self, total: int) -> str | None:
        return None

    def scheduler(self, rungs: Rungs | None, lambdas: dict[str, float]) -> None:
        return None

    def identity(self) -> dict:
        # the plain grid's identity stays as it was before rules, so that its folders resume
        return {} if self.rule == selection.BEST else {SELECT: self.rule}

    def choose(self, trials: list[TrialRecord]) -> TrialRecord:
        return select(trials, self.rule)

    def describe(self) -> str:
        return "every λ of a stage trains its whole task"


PLAIN = Grid()  # the default: the grid chosen by `best`


def select(trials: list[TrialRecord], rule: str = selection.BEST) -> TrialRecord:
    """The trial `rule` chooses (`selection.choose`; `best`: the highest mean dev accuracy over the seen tasks, ties
    to the smaller λ). Trials a search stopped early (no `dev_mean`) are not candidates."""
    lam = selection.choose(guidance.standings(trials), rule)
    return next(trial for trial in trials if trial.lam == lam and trial.dev_mean is not None)

