"""Choosing the λ of a grid stage from its trials' dev results: the one home of the rules (`DESCRIPTIONS`), read by
the grid (`ray_jobs.grid.select`, `grid_lambda.py --select`) and by the benches; DECISIONS.md ("A λ choice that
knows its noise", "The rule") says how the standard errors are taken and why. What a stage's choice means beyond its
λ line is `choice_notes`'s, the one home of those sentences."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from jumplora.uncertainty import dev_mean_and_se

RULES = ("best", "1se")
BEST, ONE_SE = RULES
DESCRIPTIONS = {BEST: "the highest mean dev accuracy over the seen tasks, ties to the smaller λ (SPEC §5)",
                ONE_SE: "the largest λ whose mean dev accuracy is within one standard error (of its paired difference "
                        "to the best) of the best's: glmnet's lambda.1se"}
TIE_TOLERANCE = 1e-12  # dev means closer than this are a tie (the same counts summed in another order)


@dataclass(frozen=True)
class Standing:
    """A λ of a stage: its mean dev accuracy over the seen tasks (a fraction), the standard error of its paired
    difference to the best λ's (None: unknown; 0 for the best itself) and whether it is within one SE of the best."""

    lam: float
    dev_mean: float
    se: float | None
    within: bool


def best_lambda(means: Mapping[float, float]) -> float:
    """SPEC §5: the λ of the highest mean; ties go to the smaller λ."""
    top = max(means.values())
    return min(lam for lam, mean in means.items() if mean >= top - TIE_TOLERANCE)


def standings(means: Mapping[float, float], flags: Mapping[float, Sequence[str | np.ndarray]] | None = None
              ) -> list[Standing]:
    """Every λ of `means` (its mean dev accuracy), by λ, with its SE to the best λ from its per-task dev `flags`
    (cells, packed or not; a λ missing there, or every λ when the best is: no SE)."""
    flags = flags or {}
    best = best_lambda(means)
    ses = paired_ses(flags, [lam for lam in sorted(means) if lam in flags], best) if best in flags else {}
    return [Standing(lam, mean, ses.get(lam), mean >= means[best] - ses.get(lam, 0.0) - TIE_TOLERANCE)
            for lam, mean in sorted(means.items())]


def seed_standings(means: Sequence[Mapping[float, float]],
                   flags: Sequence[Mapping[float, Sequence[str | np.ndarray]]] | None = None) -> list[Standing]:
    """`standings` over seeds: `means[s]` seed s's mean dev accuracy of each λ (every seed the same λ), `flags[s]` its
    dev flags (as `standings`'). One seed: `standings` itself. Several: each λ's mean over the seeds, the best λ of
    those means (`best_lambda`) and the SE of each λ's paired difference to it over the seeds: SE² = S² / n, S² the
    sample variance of the n seeds' d_s = mean_s(λ) − mean_s(best) (`uncertainty.compare`'s rule with no examples
    shared); where the seeds agree exactly (S² = 0, which finite dev sets allow) the dev examples' alone,
    √(Σ_s SE_s²) / n, SE_s a seed's `standings` SE (None when a seed's flags are unknown)."""
    flags = list(flags) if flags is not None else [{} for _ in means]
    if len(means) == 1:
        return standings(means[0], flags[0])
    lams = sorted(means[0])
    if any(sorted(seed) != lams for seed in means):
        raise ValueError("every seed of a stage must try the same λ")
    n = len(means)
    mean = {lam: math.fsum(seed[lam] for seed in means) / n for lam in lams}
    best = best_lambda(mean)
    within_seed = [paired_ses(seed_flags, lams, best) if all(lam in seed_flags for lam in lams) else None
                   for seed_flags in flags]
    found = []
    for lam in lams:
        differences = [seed[lam] - seed[best] for seed in means]
        spread = float(np.var(differences, ddof=1))
        if lam == best:
            se = 0.0
        elif spread > 0:
            se = math.sqrt(spread / n)
        else:  # the seeds agree exactly: the dev examples' noise alone, when every seed's is known
            parts = [ses[lam] for ses in within_seed if ses is not None]
            se = math.sqrt(math.fsum(p * p for p in parts)) / n if len(parts) == n else None
        found.append(Standing(lam, mean[lam], se, mean[lam] >= mean[best] - (se or 0.0) - TIE_TOLERANCE))
    return found


def paired_ses(flags: Mapping[float, Sequence[str | np.ndarray]], lams: Sequence[float], best: float
               ) -> dict[float, float]:
    """The SE of each of `lams`' paired difference to `best` (one of them) over the dev examples of their `flags`
    (`dev_mean_and_se`)."""
    return {lam: found.se for lam, found in
            zip(lams, dev_mean_and_se([flags[lam] for lam in lams], list(lams).index(best)), strict=True)}


def seed_mean_se(values: Sequence[float]) -> float:
    """The standard error of the mean over seeds of one number per seed: √(S² / n), S² their sample variance."""
    return math.sqrt(float(np.var(values, ddof=1)) / len(values))


def choose(found: Sequence[Standing], rule: str = BEST) -> float:
    """The λ `rule` chooses among a stage's `standings`."""
    if rule == BEST:
        return best_lambda({standing.lam: standing.dev_mean for standing in found})
    if rule == ONE_SE:
        return max(standing.lam for standing in found if standing.within)
    raise ValueError(f"unknown selection rule {rule!r}; known: {', '.join(RULES)}")


NO_DIFFERENCE = ("λ made no difference the data can see at this size ({why}); λ = {chosen:g} chosen by the rule's "
                 "tie-break")
ALL_TIED = "every λ has the same mean dev accuracy"
ALL_WITHIN = "every λ is within one standard error of the best"
FINALISTS = "among the λ that trained to the end (a search cut the others), "  # the cut ones were told apart
EDGE = "λ = {chosen:g} is the {end} λ of the grid: the best may lie {side} it, outside the grid"


def choice_notes(found: Sequence[Standing], chosen: float, tried: Sequence[float] | None = None) -> list[str]:
    """The lines that say what choosing `chosen` among a stage's `standings` means, beyond its λ line; `tried`: every
    λ of the stage's grid, those a search cut included (default: the `found` λ).

    - Two or more λ trained to the end and all are within one SE of the best (or tie it): the choice is arbitrary,
      `NO_DIFFERENCE`; when a search cut λ, it speaks of those that trained to the end only.
    - Otherwise, a `chosen` at either end of the grid: `EDGE` (not at a lower end of λ = 0: no λ lies below). Left
      out when the no-difference line is printed: where λ made no difference, the end the rule's tie-break took says
      nothing of where the best lies.
    - A grid of one λ: no line (nothing was chosen)."""
    tried = sorted(set(tried if tried is not None else (standing.lam for standing in found)))
    if len(tried) < 2:
        return []
    if len(found) >= 2 and all(standing.within for standing in found):
        means = [standing.dev_mean for standing in found]
        why = ALL_TIED if max(means) - min(means) <= TIE_TOLERANCE else ALL_WITHIN
        line = NO_DIFFERENCE.format(why=why, chosen=chosen)
        return [FINALISTS + line if len(found) < len(tried) else line]
    if chosen == tried[-1]:
        return [EDGE.format(chosen=chosen, end="largest", side="above")]
    if chosen == tried[0] and chosen > 0:
        return [EDGE.format(chosen=chosen, end="smallest", side="below")]
    return []
