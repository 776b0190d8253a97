"""A diverged training is stopped after its task, in one line naming the likely setting."""

from __future__ import annotations

import math

import torch

from jumplora.config import RunConfig
from jumplora.errors import DivergedError
from jumplora.methods import get_method
from jumplora.record import TaskRecord

# the settings that make a training diverge, per symptom, most likely first
LOSS_SETTINGS = ("lr", "full_lr", "alpha", "bandwidth", "lambdas")
TAU_SETTINGS = ("bandwidth", "lr", "alpha")


def check_diverged(record: TaskRecord, config: RunConfig, t: int) -> None:
    """Stop at a diverged training, once per task after its step loop (the step loop never syncs with the host): the
    first step whose loss CE + λ·P is not finite, else a τ or a merged update that is not, or an update that is zero
    everywhere (no step moved the adapter), with the likely setting: those of the symptom's settings that differ
    from the defaults (else the first one), with their values."""
    losses = [ce + penalty for ce, penalty in zip(record.ce, record.penalty, strict=True)]
    step = next((s for s, value in enumerate(losses, start=1) if not math.isfinite(value)), None)
    taus = [group for group, tau in record.thresholds.items() if not math.isfinite(tau)]
    update = record.update or {}
    updates = [name for name, values in update.items() if not torch.isfinite(values).all()]
    # every step's gradient norm was infinite, so clipping scaled every step to zero: nothing was learned
    unmoved = bool(update) and all(values.count_nonzero() == 0 for values in update.values())
    if step is None and not taus and not updates and not unmoved:
        return
    if step is not None:
        penalty_first = math.isfinite(record.ce[step - 1])
        part = f"λ·P = {record.penalty[step - 1]}" if penalty_first else f"CE = {record.ce[step - 1]}"
        what = f"the loss is not finite from step {step} of {len(losses)} on ({part})"
        settings = ("lambdas",) if penalty_first else LOSS_SETTINGS
    elif taus:
        what = f"τ of {taus[0]} is {record.thresholds[taus[0]]} after the last step"
        settings = TAU_SETTINGS
    elif updates:
        what = f"the merged update of {updates[0]} is not finite"
        settings = LOSS_SETTINGS
    else:
        what = f"no step of {len(losses)} moved the adapter (its gradients were not finite, so clipping zeroed them)"
        settings = LOSS_SETTINGS
    raise DivergedError(f"training diverged in task {t + 1} ({record.task}): {what}; likely setting: "
                        f"{likely_settings(config, settings, record.lam)}: bring it towards its default and run "
                        "again (nothing after this task was trained, no results.json was written)")


def likely_settings(config: RunConfig, names: tuple[str, ...], lam: float) -> str:
    """`--name value (default d)` of the named settings the user changed, or of the first one when none was."""
    defaults = RunConfig()

    def text(name: str) -> str:
        if name == "lambdas":
            return f"--lambdas (λ = {lam:g} in this task)"
        return f"--{name.replace('_', '-')} {getattr(config, name):g} (default {getattr(defaults, name):g})"

    # the learning rate that trained: --full-lr when every weight trains (EWC, SeqFT), else --lr
    trained_lr = "full_lr" if get_method(config.method).adapter.whole_model else "lr"
    relevant = [name for name in names if name not in ("lr", "full_lr") or name == trained_lr]
    changed = [name for name in relevant if name != "lambdas" and getattr(config, name) != getattr(defaults, name)]
    if "lambdas" in relevant and lam > 0 and config.lambdas != defaults.lambdas:
        changed.append("lambdas")
    return " or ".join(text(name) for name in changed or relevant[:1])
