"""The cache of single-task accuracies a0: its key holds the task's seed (its position in the order) and the base
model, so another order or another base model never reuses a number computed for different settings."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from jumplora import continual
from jumplora.config import RunConfig
from jumplora.record import TaskRecord


def workspace(tasks: tuple[str, ...], base: str = "tiny-aaaa") -> continual.Workspace:
    model = torch.nn.Linear(2, 2)
    model.name_or_path = f"/cache/{base}"
    encoded = {task: {"train": [], "test": []} for task in ("dbpedia", "amazon", "yahoo")}
    return continual.Workspace(RunConfig(order=1, seed=42), SimpleNamespace(fingerprint="f" * 64), tasks,
                               [0.0] * len(tasks), model, SimpleNamespace(pad_token_id=0), encoded,
                               torch.device("cpu"))


def test_a0_is_cached_per_task_seed_and_base_model(tmp_path, monkeypatch):
    trained: list[tuple[str, int]] = []

    def fake_train(model, train, *, task_name, task_seed, **_):
        trained.append((task_name, task_seed))
        return TaskRecord(task_name, 0.0, [1.0], [0.0], {}, {}, update={"w": torch.ones(1)})  # finite: not diverged

    monkeypatch.setattr(continual, "train_task", fake_train)
    # the accuracy a real training would give depends on the task's seed: stand for it by the seed itself
    monkeypatch.setattr(continual, "evaluate", lambda ws, tasks, split, shard, progress: [float(trained[-1][1])])

    def a0(tasks, base="tiny-aaaa"):
        ws = workspace(tasks, base)
        return continual.single_task_accuracies(ws, ws.model.state_dict(), tmp_path, progress=False)

    assert a0(("dbpedia", "amazon", "yahoo")) == [42000.0, 42001.0, 42002.0]
    assert len(trained) == 3
    assert a0(("dbpedia", "amazon", "yahoo")) == [42000.0, 42001.0, 42002.0] and len(trained) == 3  # cached
    # another order: amazon and yahoo sit elsewhere, so their seeds differ and nothing of theirs is reused
    assert a0(("yahoo", "amazon", "dbpedia")) == [42000.0, 42001.0, 42002.0]
    assert trained[3:] == [("yahoo", 42000), ("dbpedia", 42002)]  # amazon (second in both orders) was cached
    # another build of the base model shares nothing
    assert a0(("dbpedia",), base="tiny-bbbb") == [42000.0] and trained[-1] == ("dbpedia", 42000)
    assert len(trained) == 6
