"""Test rows labelled outside the options (MNLI's "-", SPEC §4): the loader drops and counts them; `--authors-compat`
scores them as wrong, as the authors' script scores its whole test file, and without it they stay out. A hand-made task
and a stand-in model that always answers "pos"; every accuracy is counted by hand."""

import dataclasses

import pytest
import torch

from jumplora import continual, flags
from jumplora.config import RunConfig
from jumplora.continual import ContinualState, Workspace, evaluate, summarise
from jumplora.continual.evaluation import Evaluation
from jumplora.data import RowCounts, load_benchmark
from jumplora.distributed import Shard
from jumplora.record import TaskRecord

TASKS = {"senti": {"path": "SC/senti", "instruction": "Is it good?\n", "options": ["pos", "neg"]}}


@pytest.fixture
def hand_made(write_folder, make_records, monkeypatch):
    """senti: test 4 × pos, 2 × neg, 2 × "-" and 1 × "?" (3 rows outside the options); the model answers "pos"."""
    splits = {"senti": {"train": make_records({"pos": 40, "neg": 40}, "train"),
                        "dev": make_records({"pos": 3, "neg": 3, "-": 1}, "dev"),
                        "test": make_records({"pos": 4, "neg": 2, "-": 2, "?": 1}, "test")}}
    monkeypatch.setattr(continual.evaluation, "exact_match_flags", lambda model, tokenizer, examples, **_: [
        example.label == "pos" for example in examples])
    return write_folder(splits, tasks=TASKS)


def workspace(data_dir, **fields) -> Workspace:
    """What `evaluate` reads, without a model: the benchmark and its examples (the stand-in model reads labels)."""
    config = RunConfig(order=1, data_dir=str(data_dir), device="cpu", **fields)
    benchmark = load_benchmark(data_dir, max_eval_per_task=config.max_eval_per_task, tasks=["senti"])
    task = benchmark.tasks["senti"]
    encoded = {"senti": {split: list(task.split(split)) for split in ("train", "dev", "test")}}
    return Workspace(config, benchmark, ("senti",), [0.0], None, None, encoded, torch.device("cpu"))


def test_rows_outside_the_options_are_dropped_or_scored_as_wrong(hand_made):
    dropped = workspace(hand_made)
    assert dropped.benchmark.test_rows == {"senti": RowCounts(labelled=6, unlabelled=3)}
    assert len(dropped.encoded["senti"]["test"]) == 6
    # dropped: 4 right of the 6 labelled rows; the authors' scoring: 4 right of all 9 rows of the file
    labelled = [example.label == "pos" for example in dropped.encoded["senti"]["test"]]  # the stand-in's verdicts
    assert evaluate(dropped, ("senti",), "test", progress=False) == Evaluation([4 / 6], [flags.pack(labelled)])
    authors = dataclasses.replace(dropped, config=dataclasses.replace(dropped.config, authors_compat=True))
    # the 3 rows outside the options are 3 wrong flags after the scored ones: the flags' mean is the accuracy
    assert evaluate(authors, ("senti",), "test", progress=False) == \
        Evaluation([4 / 9], [flags.pack(labelled + [False] * 3)])
    # dev is never rescored: its "-" row is dropped either way (3 right of 6)
    assert evaluate(authors, ("senti",), "dev", progress=False) == evaluate(dropped, ("senti",), "dev", progress=False)
    assert evaluate(authors, ("senti",), "dev", progress=False).accuracies == [3 / 6]


def test_under_a_cap_the_rows_outside_the_options_keep_their_share(hand_made):
    capped = workspace(hand_made, max_eval_per_task=3, authors_compat=True)
    test = capped.encoded["senti"]["test"]
    assert sorted(example.label for example in test) == ["neg", "pos", "pos"]  # stratified: 2 pos, 1 neg
    # 2 right of 3 scored rows, plus the unlabelled rows' share of the file (3 of 9) counted wrong: 3 · 3/6 = 1.5
    found = evaluate(capped, ("senti",), "test", progress=False)
    assert found.accuracies == [2 / 4.5]
    # in the flags the 1.5 rows are rounded half up to 2 wrong flags (DECISIONS): a mean of 2/5, half a row off
    assert found.flags == [flags.pack([example.label == "pos" for example in test] + [False] * 2)]
    plain = dataclasses.replace(capped, config=dataclasses.replace(capped.config, authors_compat=False))
    assert evaluate(plain, ("senti",), "test", progress=False).accuracies == [2 / 3]


@pytest.mark.parametrize(("compat", "scoring"), [(False, "dropped"), (True, "wrong")])
def test_results_record_the_rows_and_the_scoring(hand_made, compat, scoring):
    ws = workspace(hand_made, authors_compat=compat)
    update = {"encoder.block.0.layer.0.SelfAttention.q": torch.ones(2, 2)}
    record = TaskRecord(task="senti", lam=0.0, ce=[1.0, 0.5, 0.2], penalty=[0.0] * 3, thresholds={},
                        sparsity=TaskRecord.sparsity_of(update), update=update, test=[0.5], dev=[0.5], seconds=7.5)
    results = summarise(ws, ContinualState(records=[record], runtime={"world_size": 1, "threads": 2}), None)
    assert results.unlabelled_test == {"scoring": scoring, "rows": {"senti": 3}, "labelled_rows": {"senti": 6}}
    # the cost of the one training: 3 steps, 7.5 s on 2 CPU threads
    assert {key: results.cost[key] for key in ("trainings", "optimizer_steps", "wall_seconds", "device_hours",
                                                  "device_unit", "task_seconds")} == \
        {"trainings": 1, "optimizer_steps": 3, "wall_seconds": 7.5, "device_hours": 2 * 7.5 / 3600,
         "device_unit": "CPU", "task_seconds": [7.5]}



class AllReduced(Exception):
    """Stops an evaluation at its all-reduce, once the worker's part is taken."""


def test_sharded_workers_gather_every_examples_flag(hand_made, monkeypatch):
    """2 workers, each decoding 3 of the 6 labelled rows, in this process: worker 1's part is taken at its all-reduce,
    then worker 0's all-reduce adds it, and worker 0 ends with the whole cell's flags, in order, the rows outside the
    options last, as one process finds them."""
    ws = workspace(hand_made, authors_compat=True)
    single = evaluate(ws, ("senti",), "test", progress=False)
    parts = []

    def taken(self, tensor):
        parts.append(tensor.clone())
        raise AllReduced

    monkeypatch.setattr(Shard, "sum_", taken)
    with pytest.raises(AllReduced):
        evaluate(ws, ("senti",), "test", Shard(1, 2, 1), progress=False)
    monkeypatch.setattr(Shard, "sum_", lambda self, tensor: tensor.add_(parts[0]))
    assert evaluate(ws, ("senti",), "test", Shard(0, 2, 0), progress=False) == single
