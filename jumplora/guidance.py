"""Guidance on λ from a grid stage's record (`ray_jobs.grid.run_stage`), for the grid's selection, driver, report and
MLflow logging: each trial's last dev evaluation, each λ's standing against the best, the stage's plot of dev accuracy
against λ, the chosen λ's dev mean with its standard error, and what the whole search cost."""

from __future__ import annotations

import math
from pathlib import Path

from jumplora import selection, uncertainty
from jumplora.results import StageRecord, TrialRecord


def last_dev(trial: TrialRecord) -> tuple[float, float | None, float, str]:
    """A trial's last dev evaluation: (mean, past-task part, current-task part, where): at the end of the task on the
    full dev sets, or, for a trial a search cut, at its last rung on the rung subset."""
    if trial.dev_mean is not None:
        return trial.dev_mean, trial.dev_past, trial.dev_current, "end of the task"
    return (trial.rung_dev_mean, trial.rung_dev_past, trial.rung_dev_current,
            f"step {trial.cut_at_step} (rung subset)")


def standings(trials: list[TrialRecord]) -> list[selection.Standing]:
    """The stage's λ that trained to the end (a search's cut trials have no `dev_mean`), each with its mean dev
    accuracy and, from its dev flags, the standard error of its paired difference to the best (`selection`); over the
    seeds of a grid of several (`selection.seed_standings`)."""
    ended = [trial for trial in trials if trial.dev_mean is not None]
    of = [[trial for trial in ended if trial.seed == seed] for seed in dict.fromkeys(trial.seed for trial in ended)]
    return selection.seed_standings([{trial.lam: trial.dev_mean for trial in mine} for mine in of],
                                    [{trial.lam: trial.dev_flags for trial in mine if trial.dev_flags} for mine in of])


def dev_mean_text(trial: TrialRecord) -> str:
    """A trial's mean dev accuracy over the seen tasks (%) ± its standard error over its dev examples (points,
    `uncertainty.dev_mean_se`), as the stage line and the grid's report print the chosen λ's; the mean alone for a
    trial recorded before its dev flags were kept."""
    if not trial.dev_flags:
        return f"{100 * trial.dev_mean:.2f}"
    return f"{100 * trial.dev_mean:.2f} ± {100 * uncertainty.dev_mean_se(trial.dev_flags):.2f}"


def chosen_dev_text(record: StageRecord) -> str:
    """The chosen λ's mean dev accuracy over the seen tasks (%) ± its standard error (points): over its dev examples
    in a grid of one seed (`dev_mean_text`); in a grid of several, the mean over the seeds ± the SE of that mean over
    them (`selection.seed_mean_se`)."""
    if record.seeds is None:
        return dev_mean_text(record.chosen)
    values = [trial.dev_mean for trial in record.trials if trial.selected]
    mean = math.fsum(values) / len(values)
    return f"{100 * mean:.2f} ± {100 * selection.seed_mean_se(values):.2f} over {len(values)} seeds"


def choice_notes(trials: list[TrialRecord], chosen: float) -> list[str]:
    """`selection.choice_notes` of a stage that chose `chosen` among `trials` (those a search cut count as tried)."""
    return selection.choice_notes(standings(trials), chosen, [trial.lam for trial in trials])


def lambda_plotted(record: StageRecord) -> bool:
    """Stages that tried λ > 0 have a λ plot (stage 1 trains with λ = 0 only)."""
    return any(trial.lam > 0 for trial in record.trials)


def lambda_plot_name(record: StageRecord) -> str:
    return f"lambda_task{record.task:02d}.png"


def lambda_plot(record: StageRecord, path: Path) -> dict:
    """`plots.lambda_profile` of a stage: every λ's last dev evaluation (`last_dev`; in a grid of several seeds, its
    mean over them) against λ, with the SE of its paired difference to the best (`standings`; None for a trial cut by
    a search or recorded without dev flags)."""
    from jumplora import plots  # matplotlib only where a plot is drawn: a dry run writes no font cache to $HOME

    ses = {standing.lam: standing.se for standing in standings(record.trials)}
    points = []
    for lam in dict.fromkeys(trial.lam for trial in record.trials):
        group = [trial for trial in record.trials if trial.lam == lam]  # one trial a seed
        parts = [last_dev(trial)[:3] for trial in group]
        mean, past, current = (None if None in values else math.fsum(values) / len(values)
                               for values in zip(*parts, strict=True))
        end = all(trial.dev_mean is not None for trial in group)
        points.append({"lam": lam, "mean": mean, "past": past, "current": current, "end": end,
                       "selected": any(trial.selected for trial in group), "se": ses.get(lam) if end else None})
    return plots.lambda_profile(f"task {record.task} {record.task_name}", points, path)


def search_cost(records: list[StageRecord]) -> dict:
    """The whole search: the stages' `grid.trials_cost` added up (stages recorded before costs were: left out)."""
    costs = [record.cost for record in records if record.cost is not None]
    return {"stages": len(costs), **{key: sum(cost[key] for cost in costs)
                                     for key in ("trainings", "optimizer_steps", "seconds", "device_hours")},
            "device_unit": "+".join(sorted({cost["device_unit"] for cost in costs}))}
