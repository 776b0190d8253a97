"""The divergence check after a task's steps (`continual.check_diverged`), on records as `train_task` returns them:
the first non-finite step, else τ, else the update, else an adapter no step moved, with the settings the user
changed for that symptom (else the first one the symptom points to)."""

import math

import pytest
import torch

from jumplora.config import RunConfig
from jumplora.continual import check_diverged
from jumplora.errors import DivergedError
from jumplora.record import TaskRecord

NAN, INF = math.nan, math.inf


def record(ce=(1.0, 0.9, 0.8), penalty=(0.0, 0.0, 0.0), tau=0.01, update=1.0, lam=0.0) -> TaskRecord:
    return TaskRecord("amazon", lam, list(ce), list(penalty), {"global": tau}, {},
                      update={"encoder.block.0.layer.0.SelfAttention.q": torch.full((2, 2), update)})


@pytest.mark.parametrize(("trained", "config", "message"), [
    (record(ce=(1.0, NAN, NAN)), RunConfig(lr=1e10),
     "the loss is not finite from step 2 of 3 on (CE = nan); likely setting: --lr 1e+10 (default 0.001):"),
    (record(ce=(1.0, 0.9, INF)), RunConfig(lr=1e10, alpha=1e30),
     "the loss is not finite from step 3 of 3 on (CE = inf); likely setting: --lr 1e+10 (default 0.001) or "
     "--alpha 1e+30 (default 32):"),
    (record(penalty=(0.0, INF, NAN), lam=3e4), RunConfig(),
     "the loss is not finite from step 2 of 3 on (λ·P = inf); likely setting: --lambdas (λ = 30000 in this task):"),
    (record(tau=NAN), RunConfig(), "τ of global is nan after the last step; likely setting: --bandwidth 0.001 "
                                   "(default 0.001):"),
    (record(update=INF), RunConfig(method="ewc", full_lr=1.0),
     "the merged update of encoder.block.0.layer.0.SelfAttention.q is not finite; likely setting: --full-lr 1 "
     "(default 0.0001):"),
    (record(ce=(1.0, NAN, NAN)), RunConfig(method="seqft"),  # nothing changed: the rate that trained, --full-lr
     "the loss is not finite from step 2 of 3 on (CE = nan); likely setting: --full-lr 0.0001 (default 0.0001):"),
    (record(update=0.0), RunConfig(alpha=1e30),
     "no step of 3 moved the adapter (its gradients were not finite, so clipping zeroed them); likely setting: "
     "--alpha 1e+30 (default 32):"),
])
def test_a_diverged_training_names_the_first_bad_step_and_the_setting(trained, config, message):
    with pytest.raises(DivergedError) as stopped:
        check_diverged(trained, config, 1)
    assert str(stopped.value).startswith(f"training diverged in task 2 (amazon): {message}")
    assert str(stopped.value).endswith("bring it towards its default and run again (nothing after this task was "
                                       "trained, no results.json was written)")


def test_a_finite_training_passes():
    check_diverged(record(), RunConfig(lr=1e10), 0)
