"""Choosing the λ of a grid stage from its trials' dev results: the one home of the rule, read by the grid
(`ray_jobs.grid.select`, `grid_lambda.py --select`) and by the benches (`bench/search_layouts.py`,
`bench/selection.py`).

- `best` (SPEC §5, the default): the highest mean dev accuracy over the seen tasks; ties (`TIE_TOLERANCE`) go to the
  smaller λ.
- `1se` (glmnet's `lambda.1se`): the largest λ whose mean dev accuracy is within one standard error of the best one's:
  the most regularisation the data cannot tell from the best.

The standard error is that of a λ's paired difference to the best λ (`best`'s choice): every λ of a stage is scored
on the same dev examples, so per example the difference of the right / wrong flags is taken, stratified by task
(`uncertainty.dev_mean_and_se`). A λ whose flags are unknown (a trial recorded before they were kept) has no SE and
counts as within only on a tie."""

from __future__ import annotations

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
    kept = [lam for lam in sorted(means) if lam in flags] if best in flags else []
    ses = {lam: found.se for lam, found in
           zip(kept, dev_mean_and_se([flags[lam] for lam in kept], kept.index(best)), strict=True)} if kept else {}
    return [Standing(lam, mean, ses.get(lam), mean >= means[best] - ses.get(lam, 0.0) - TIE_TOLERANCE)
            for lam, mean in sorted(means.items())]


def choose(found: Sequence[Standing], rule: str = BEST) -> float:
    """The λ `rule` chooses among a stage's `standings`."""
    if rule == BEST:
        return best_lambda({standing.lam: standing.dev_mean for standing in found})
    if rule == ONE_SE:
        return max(standing.lam for standing in found if standing.within)
    raise ValueError(f"unknown selection rule {rule!r}; known: {', '.join(RULES)}")
