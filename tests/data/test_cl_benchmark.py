import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from jumplora.data import load_benchmark
from jumplora.data.cl_benchmark import load_cl_benchmark, task_test_fingerprint, validate_cl_benchmark
from jumplora.data.tasks import DEFAULT_TASK_SPECS, PAPER_ORDERS
from jumplora.errors import JumpLoRAError

REPO = Path(__file__).resolve().parents[2]


def class_counts(examples):
    return dict(Counter(example.label for example in examples))


def is_subsequence(part, whole):
    remaining = iter(whole)
    return all(item in remaining for item in part)


def test_loads_specs_orders_and_examples(write_folder, tiny_splits):
    benchmark = load_cl_benchmark(write_folder(tiny_splits))
    senti = benchmark.tasks["senti"]
    assert benchmark.orders == {1: ("senti", "topic")} and benchmark.name == "cl_benchmark"
    assert senti.spec.options == ("pos", "neg") and senti.spec.instruction == "Is it good?\n"
    assert [len(senti.train), len(senti.dev), len(senti.test)] == [16, 6, 8]
    assert (senti.train[0].text, senti.train[0].label) == ("train pos 0", "pos")
    assert class_counts(benchmark.tasks["topic"].test) == {"a": 3, "b": 3, "c": 3}
    assert benchmark.report == []


def test_load_benchmark_with_a_folder_reads_the_folder(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    options = {"seed": 3, "max_train_per_task": 5, "max_eval_per_task": 2, "strict": True, "tasks": ["topic"]}
    assert load_benchmark(root, **options) == load_cl_benchmark(root, **options)


def test_reads_only_the_requested_tasks(write_folder, tiny_splits):
    root = write_folder({"senti": tiny_splits["senti"]})  # no topic folder at all
    benchmark = load_cl_benchmark(root, tasks=["senti"])
    assert list(benchmark.tasks) == ["senti"] and benchmark.orders == {1: ("senti", "topic")}
    with pytest.raises(JumpLoRAError, match="missing file .*topic.*train.json"):
        load_cl_benchmark(root)
    with pytest.raises(JumpLoRAError, match="unknown task.*nope.*known tasks are senti, topic"):
        load_cl_benchmark(root, tasks=["senti", "nope"])


def test_without_tasks_json_the_default_specs_and_paths_apply(write_folder, make_records):
    splits = {
        split: make_records({"entailment": 2, "contradiction": 2, "neutral": 1}, split)
        for split in ("train", "dev", "test")
    }
    root = write_folder({"cb": splits}, tasks=None)
    assert (root / "NLI" / "CB" / "train.json").is_file()
    benchmark = load_cl_benchmark(root, tasks=["cb"])
    assert benchmark.tasks["cb"].spec == DEFAULT_TASK_SPECS["cb"] and benchmark.orders == PAPER_ORDERS
    assert len(benchmark.tasks["cb"].train) == 5


def test_missing_data_dir(tmp_path):
    with pytest.raises(JumpLoRAError, match=f"data directory {tmp_path / 'absent'} does not exist"):
        load_cl_benchmark(tmp_path / "absent")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[{", "is not valid JSON"),
        ('{"sentence": "a", "label": "pos"}', "top level must be a JSON list"),
        ('[{"sentence": "a", "label": "pos"}, {"sentence": "b"}]', "item 1 must be an object with string fields"),
        ('[{"sentence": "a", "label": 1}]', "item 0 must be an object with string fields 'sentence' and 'label'"),
        ('["just text"]', "item 0"),
    ],
)
def test_malformed_split_files_name_the_file(write_folder, tiny_splits, content, message):
    root = write_folder(tiny_splits)
    broken = root / "SC" / "senti" / "dev.json"
    broken.write_text(content, encoding="utf-8")
    with pytest.raises(JumpLoRAError) as error:
        load_cl_benchmark(root)
    assert str(broken) in str(error.value) and message in str(error.value)


def test_test_split_keeps_at_most_500_per_class(write_folder, tiny_splits, make_records):
    splits = {"senti": {**tiny_splits["senti"], "test": make_records({"pos": 600, "neg": 100}, "test")}}
    benchmark = load_cl_benchmark(write_folder(splits), tasks=["senti"])
    test = benchmark.tasks["senti"].test
    assert class_counts(test) == {"pos": 500, "neg": 100}
    assert is_subsequence([e.text for e in test], [r["sentence"] for r in splits["senti"]["test"]])


def test_oversized_pool_keeps_1000_per_class_and_resplits_80_20(write_folder, tiny_splits, make_records):
    train, dev = make_records({"pos": 1200, "neg": 500}, "train"), make_records({"pos": 300, "neg": 200}, "dev")
    root = write_folder({"senti": {**tiny_splits["senti"], "train": train, "dev": dev}})
    task = load_cl_benchmark(root, tasks=["senti"]).tasks["senti"]  # pool 2200 > 1000 x 2 classes
    assert class_counts(task.train) == {"pos": 800, "neg": 560}
    assert class_counts(task.dev) == {"pos": 200, "neg": 140}
    train_texts, dev_texts = {e.text for e in task.train}, {e.text for e in task.dev}
    assert not train_texts & dev_texts
    assert train_texts | dev_texts <= {r["sentence"] for r in train + dev}


def test_pool_within_the_total_limit_is_kept_as_written(write_folder, tiny_splits, make_records):
    train, dev = make_records({"pos": 1200, "neg": 500}, "train"), make_records({"neg": 200}, "dev")
    root = write_folder({"senti": {**tiny_splits["senti"], "train": train, "dev": dev}})
    task = load_cl_benchmark(root, tasks=["senti"]).tasks["senti"]  # 1900 <= 2000, like the release's QQP
    assert [e.text for e in task.train] == [r["sentence"] for r in train]
    assert [e.text for e in task.dev] == [r["sentence"] for r in dev]


def test_caps_keep_a_stratified_subsequence(write_folder, tiny_splits, make_records):
    splits = {**tiny_splits, "senti": {**tiny_splits["senti"], "train": make_records({"pos": 30, "neg": 10}, "t")}}
    benchmark = load_cl_benchmark(write_folder(splits), max_train_per_task=10, max_eval_per_task=4)
    senti, topic = benchmark.tasks["senti"], benchmark.tasks["topic"]
    # shares 7.5 / 2.5 -> 7 / 2, the one left over goes to the class seen first (tie on the remainder)
    assert class_counts(senti.train) == {"pos": 8, "neg": 2}
    assert class_counts(topic.train) == {"a": 4, "b": 3, "c": 3}  # 3.33 each: floors 3, one more for "a"
    assert class_counts(senti.dev) == {"pos": 2, "neg": 2} and class_counts(senti.test) == {"pos": 2, "neg": 2}
    assert class_counts(topic.dev) == {"a": 2, "b": 1, "c": 1} and len(topic.test) == 4
    assert is_subsequence([e.text for e in senti.train], [r["sentence"] for r in splits["senti"]["train"]])


def test_caps_larger_than_a_split_change_nothing(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    assert load_cl_benchmark(root, max_train_per_task=1000, max_eval_per_task=1000) == load_cl_benchmark(root)


@pytest.mark.parametrize("cap", [0, -3, True, 2.5])
def test_bad_caps_are_refused(write_folder, tiny_splits, cap):
    with pytest.raises(JumpLoRAError, match="max_train_per_task must be a positive whole number"):
        load_cl_benchmark(write_folder(tiny_splits), max_train_per_task=cap)


def test_same_seed_same_examples_other_seed_other_examples(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    first, again = (load_cl_benchmark(root, seed=1, max_train_per_task=6) for _ in range(2))
    other = load_cl_benchmark(root, seed=2, max_train_per_task=6)
    assert first.tasks == again.tasks and first.fingerprint == again.fingerprint
    assert first.tasks["senti"].train != other.tasks["senti"].train and first.fingerprint != other.fingerprint


def test_fingerprint_is_the_same_in_fresh_processes(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    script = (
        f"from jumplora.data.cl_benchmark import load_cl_benchmark as load; "
        f"print(load({str(root)!r}, max_train_per_task=5).fingerprint)"
    )
    printed = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env={"PYTHONHASHSEED": hash_seed, "PATH": ""},
        ).stdout.strip()
        for hash_seed in ("1", "2")
    }
    assert printed == {load_cl_benchmark(root, max_train_per_task=5).fingerprint}


def test_fingerprint_changes_when_one_example_changes(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    before = load_cl_benchmark(root).fingerprint
    path = root / "TC" / "topic" / "test.json"
    content = json.loads(path.read_text())
    content[-1]["sentence"] += "!"
    path.write_text(json.dumps(content))
    changed_text = load_cl_benchmark(root).fingerprint
    content[-1]["label"] = "a"
    path.write_text(json.dumps(content))
    changed_label = load_cl_benchmark(root).fingerprint
    assert len({before, changed_text, changed_label}) == 3
    assert len(before) == 64 and int(before, 16) >= 0


def test_a_tasks_test_fingerprint_is_its_test_examples_whatever_the_training_caps_or_tasks_loaded(write_folder,
                                                                                                 tiny_splits):
    """The digest of a task's test examples (`uncertainty.task_key`): sha256 over the task's name, then each test
    example's [text, label], one JSON line each; other training caps or other tasks loaded beside it keep it, another
    seed's test examples change it."""
    import hashlib

    root = write_folder(tiny_splits)
    one = load_cl_benchmark(root, seed=1, max_train_per_task=6, max_eval_per_task=4)
    other_caps = load_cl_benchmark(root, seed=1, max_train_per_task=9, max_eval_per_task=4, tasks=["topic"])
    other_seed = load_cl_benchmark(root, seed=2, max_train_per_task=6, max_eval_per_task=4)
    topic = one.tasks["topic"]
    lines = [json.dumps("topic")] + [json.dumps([e.text, e.label], ensure_ascii=False) for e in topic.test]
    assert task_test_fingerprint(topic) == hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()
    assert one.fingerprint != other_caps.fingerprint
    assert task_test_fingerprint(other_caps.tasks["topic"]) == task_test_fingerprint(topic)
    assert other_seed.tasks["topic"].test != topic.test
    assert task_test_fingerprint(other_seed.tasks["topic"]) != task_test_fingerprint(topic)


def test_unusable_examples_are_dropped_with_a_warning_or_refused_when_strict(write_folder, tiny_splits):
    senti = tiny_splits["senti"]
    senti["test"].append({"sentence": "weird", "label": "meh"})
    senti["train"].append(dict(senti["test"][0]))  # a test text in train: leakage
    root = write_folder(tiny_splits)
    benchmark = load_cl_benchmark(root)
    assert len(benchmark.tasks["senti"].test) == 8 and len(benchmark.tasks["senti"].train) == 16
    assert benchmark.report == [
        "senti/train: 1 dropped, text also in dev/test",
        "senti/test: 1 dropped, label not an option ('meh': 1)",
    ]
    with pytest.raises(JumpLoRAError, match=r"strict data check failed for .*CL_Benchmark: senti/train: 1 dropped"):
        load_cl_benchmark(root, strict=True)


@pytest.mark.parametrize(("split", "records", "why"), [
    ("test", [], "its file lists none"),
    ("test", [{"sentence": "a", "label": "meh"}, {"sentence": "b", "label": "-"}],
     "2 dropped, label not an option ('-': 1, 'meh': 1)"),
    ("dev", [{"sentence": "", "label": "a"}, {"sentence": "  ", "label": "b"}], "2 dropped, empty text"),
    ("train", [{"sentence": "test a 0", "label": "a"}], "1 dropped, text also in dev/test"),
])
@pytest.mark.parametrize("strict", [False, True])
def test_a_split_left_empty_is_refused_strict_or_not(split, records, why, strict, write_folder, tiny_splits):
    tiny_splits["topic"][split] = records
    root = write_folder(tiny_splits)
    with pytest.raises(JumpLoRAError) as error:
        load_cl_benchmark(root, strict=strict, max_train_per_task=4, max_eval_per_task=2)
    assert str(error.value) == (f"task 'topic' of {root}: its {split} split has no usable example after validation "
                                f"({why}): fix the data")
    assert validate_cl_benchmark(root)  # `jumplora data check` still reports such a folder


def test_a_split_left_empty_in_a_task_not_loaded_is_not_checked(write_folder, tiny_splits):
    tiny_splits["topic"]["test"] = []
    assert list(load_cl_benchmark(write_folder(tiny_splits), tasks=["senti"]).tasks) == ["senti"]


def test_too_long_sources_are_counted_on_the_usable_examples(write_folder, tiny_splits):
    root = write_folder(tiny_splits)
    # "train pos 0" has 11 characters, "dev pos 0" 9, "test pos 0" 10: count characters as tokens, max 10
    reports = validate_cl_benchmark(root, tasks=["senti"], count_source_tokens=lambda spec, text: len(text),
                                    max_source_tokens=10)
    assert [(report.split, report.too_long) for report in reports] == [("train", reports[0].kept), ("dev", 0),
                                                                        ("test", 0)]
    assert reports[0].findings() == f"{reports[0].kept} longer than the maximum source length (text truncated)"


def test_real_data_loads_as_released_except_the_unusable_rows(real_data_dir):
    benchmark = load_cl_benchmark(real_data_dir)
    sizes = {name: (len(t.train), len(t.dev), len(t.test)) for name, t in benchmark.tasks.items()}
    assert sizes == {
        "dbpedia": (11194, 2806, 7000),
        "amazon": (3998, 1002, 2500),
        "yahoo": (1602, 401, 5000),
        "agnews": (3199, 801, 2000),
        "mnli": (2400, 600, 1500),
        "cb": (199, 51, 56),
        "wic": (1599, 401, 638),
        "copa": (320, 80, 100),
        "qqp": (1599, 401, 1000),
        "boolqa": (1599, 401, 1000),
        "rte": (1597, 401, 277),
        "imdb": (1599, 401, 1000),
        "yelp": (3997, 1003, 2500),
        "sst-2": (1599, 401, 872),
        "multirc": (1599, 401, 1000),
    }
    assert benchmark.orders == PAPER_ORDERS
    assert benchmark.report == [
        "mnli/test: 131 dropped, label not an option ('-': 131)",
        "rte/train: 2 dropped, duplicate text within the split",
    ]
    # counted, for the authors' scoring (SPEC §4: the whole file, "-" always wrong)
    assert {name: (rows.labelled, rows.unlabelled) for name, rows in benchmark.test_rows.items()} == \
        {name: (size[2], 131 if name == "mnli" else 0) for name, size in sizes.items()}


def test_real_data_caps_per_class(real_data_dir):
    benchmark = load_cl_benchmark(real_data_dir, tasks=PAPER_ORDERS[1], max_train_per_task=1000, max_eval_per_task=70)
    assert list(benchmark.tasks) == list(PAPER_ORDERS[1])
    dbpedia = benchmark.tasks["dbpedia"]
    assert set(class_counts(dbpedia.test).values()) == {5} and len(dbpedia.test) == 70  # 500 per class -> 5 each
    written = Counter(row["label"] for row in json.loads((real_data_dir / "TC/dbpedia/train.json").read_text()))
    for label, count in class_counts(dbpedia.train).items():
        share = 1000 * written[label] / written.total()
        assert int(share) <= count <= int(share) + 1
    assert len(benchmark.tasks["yahoo"].train) == 1000 and len(benchmark.tasks["agnews"].dev) == 70


def test_validation_report_of_the_real_data(real_data_dir):
    reports = validate_cl_benchmark(real_data_dir)
    assert len(reports) == 45
    with_problems = {(r.task, r.split): r for r in reports if r.problems}
    assert set(with_problems) == {("mnli", "test"), ("rte", "train")}
    assert with_problems["mnli", "test"].unknown_labels == {"-": 131}
    assert with_problems["rte", "train"].duplicates == 2
