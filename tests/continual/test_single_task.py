"""The cache of single-task accuracies a0: its key holds the task's seed (its position in the order) and the base
model, so another order or another base model never reuses a number computed for different settings; and the adapter
kind with its own fields, not the method, so the methods that share an adapter share its a0."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from jumplora import continual
from jumplora.config import RunConfig
from jumplora.continual.evaluation import Evaluation
from jumplora.cost import Cost
from jumplora.record import TaskRecord
from jumplora.training import Trained


def workspace(tasks: tuple[str, ...], base: str = "tiny-aaaa", **fields) -> continual.Workspace:
    model = torch.nn.Linear(2, 2)
    model.name_or_path = f"/cache/{base}"
    encoded = {task: {"train": [], "test": []} for task in ("dbpedia", "amazon", "yahoo")}
    return continual.Workspace(RunConfig.of({"order": 1, "seed": 42, **fields}),
                               SimpleNamespace(fingerprint="f" * 64, test_rows={}), tasks, [0.0] * len(tasks), model,
                               SimpleNamespace(pad_token_id=0), encoded, torch.device("cpu"))


def fake_trainer(trained: list):
    """Stands for `train_task`: records (task, seed, method) and makes a record of three optimizer steps."""

    def fake_train(model, train, *, task_name, task_seed, config, **_):
        trained.append((task_name, task_seed, config.method))
        record = TaskRecord(task=task_name, lam=0.0, ce=[1.0, 0.5, 0.25], penalty=[0.0] * 3, thresholds={},
                            sparsity={}, update={"w": torch.ones(1)})  # finite: not diverged
        return Trained([record], SimpleNamespace(merge=lambda k: None))

    return fake_train


def test_a0_is_cached_per_task_seed_and_base_model(tmp_path, monkeypatch):
    trained: list[tuple[str, int, str]] = []
    monkeypatch.setattr(continual.loop, "train_task", fake_trainer(trained))
    # the accuracy a real training would give depends on the task's seed: stand for it by the seed itself
    monkeypatch.setattr(continual.evaluation, "evaluate",
                        lambda ws, tasks, split, shard, progress: Evaluation([float(trained[-1][1])], ["1:AQ=="]))

    def a0(tasks, base="tiny-aaaa"):
        ws = workspace(tasks, base)
        return continual.single_task_accuracies(ws, ws.model.state_dict(), tmp_path, progress=False).accuracies

    assert a0(("dbpedia", "amazon", "yahoo")) == [42000.0, 42001.0, 42002.0]
    assert len(trained) == 3
    assert a0(("dbpedia", "amazon", "yahoo")) == [42000.0, 42001.0, 42002.0] and len(trained) == 3  # cached
    # another order: amazon and yahoo sit elsewhere, so their seeds differ and nothing of theirs is reused
    assert a0(("yahoo", "amazon", "dbpedia")) == [42000.0, 42001.0, 42002.0]
    assert [run[:2] for run in trained[3:]] == [("yahoo", 42000), ("dbpedia", 42002)]  # amazon (second in both) cached
    # another build of the base model shares nothing
    assert a0(("dbpedia",), base="tiny-bbbb") == [42000.0] and trained[-1][:2] == ("dbpedia", 42000)
    assert len(trained) == 6


def test_a0_is_keyed_by_the_adapter_not_the_method(tmp_path, monkeypatch):
    """ELLA's own a0 is plain LoRA trained alone: IncLoRA's, and the shared a0 of every method (FWT last row), trained
    once; JumpLoRA+ELLA's own a0 is JumpLoRA+IncLoRA's, with its threshold grouping; the run's cost counts what it
    trained, not what it read from the cache."""
    trained: list[tuple[str, int, str]] = []
    monkeypatch.setattr(continual.loop, "train_task", fake_trainer(trained))
    monkeypatch.setattr(continual.evaluation, "evaluate",
                        lambda ws, tasks, split, shard, progress: Evaluation([0.5], ["2:AQ=="]))
    tasks = ("dbpedia", "amazon")

    def baselines(method, **fields):
        ws = workspace(tasks, method=method, **fields)
        return continual.single_task_baselines(ws, ws.model.state_dict(), tmp_path, progress=False)

    ella = baselines("ella", lambdas=[0.0, 3e4, 3e4, 3e4], ella_delta="interpolated")
    assert [method for *_, method in trained] == ["inclora", "inclora"]  # its own kind is the shared one: once
    assert ella.own == ella.shared == [0.5, 0.5] and ella.cost == Cost(2, 6, ella.cost.seconds)
    assert ella.own_flags == ella.shared_flags == ["2:AQ==", "2:AQ=="]  # each task's test flags, kept in the cache
    assert baselines("inclora").cost == Cost() and baselines("o-lora", olora_lambda1=2.0).cost == Cost()
    jump = baselines("jumplora+ella", threshold="per_block")
    assert [method for *_, method in trained[2:]] == ["jumplora+inclora"] * 2 and jump.cost.trainings == 2
    assert baselines("jumplora+inclora", threshold="per_block").cost == Cost()  # its a0 is JumpLoRA+ELLA's
    assert baselines("jumplora+inclora").cost.trainings == 2  # the global threshold is another a0
    assert baselines("seqft").cost.trainings == 2 and baselines("ewc", lambdas=[0.0, 1e4, 1e4, 1e4]).cost == Cost()
    assert len(trained) == 8
