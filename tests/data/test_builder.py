import json
from collections import Counter

import pytest

from jumplora.data.builder import SOURCES, build_cl_benchmark
from jumplora.data.cl_benchmark import load_cl_benchmark
from jumplora.data.tasks import DEFAULT_TASK_SPECS, PAPER_ORDERS
from jumplora.errors import JumpLoRAError

Dataset = pytest.importorskip("datasets", reason="the builder's tests need the optional package datasets").Dataset


def stand_in(source, split, per_label=6):
    """Rows with every column the source reads, `per_label` rows per label id, and one unlabelled (-1) row."""
    rows = [
        {column: f"{split} {column} {label} {i}" for column in source.columns} | {source.label_column: label}
        for label in [*source.labels, -1]
        for i in range(per_label if label != -1 else 1)
    ]
    for i, row in enumerate(rows):
        if "question_content" in row and i % 2:
            row["question_content"] = ""
    return Dataset.from_list(rows)


def fake_hub(overrides=None, calls=None):
    """A load_dataset stand-in: `overrides[(hub, config, split)]` or a generated stand-in for that source."""

    def load(path, name=None, split=None):
        if calls is not None:
            calls.append((path, name, split))
        if overrides and (path, name, split) in overrides:
            return overrides[path, name, split]
        source = next(s for s in SOURCES.values() if (s.hub, s.config) == (path, name))
        return stand_in(source, split)

    return load


def read(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_builds_all_fifteen_tasks_that_the_loader_reads_cleanly(tmp_path):
    out = build_cl_benchmark(tmp_path / "CL", load_dataset=fake_hub())
    assert out == tmp_path / "CL" and sorted(p.name for p in tmp_path.iterdir()) == ["CL"]
    content = read(out / "tasks.json")
    assert content["orders"] == {str(order): list(tasks) for order, tasks in PAPER_ORDERS.items()}
    for name, spec in DEFAULT_TASK_SPECS.items():
        assert read(out / spec.path / "labels.json") == list(spec.options)
        assert content["tasks"][name]["options"] == list(spec.options)
    benchmark = load_cl_benchmark(out, strict=True)
    assert {name: task.spec for name, task in benchmark.tasks.items()} == DEFAULT_TASK_SPECS
    dbpedia = benchmark.tasks["dbpedia"]  # 6 rows per class: 5 train (round(4.8)) and 1 dev; 6 test
    assert (len(dbpedia.train), len(dbpedia.dev), len(dbpedia.test)) == (14 * 5, 14, 14 * 6)


def test_protocol_caps_pool_and_test_per_class_and_skips_unlabelled_rows(tmp_path):
    train = Dataset.from_dict({"sentence": [f"s{i}" for i in range(1131)], "label": [0] * 1100 + [1] * 30 + [-1]})
    test = Dataset.from_dict({"sentence": [f"v{i}" for i in range(605)], "label": [1] * 600 + [0] * 5})
    hub = fake_hub({("nyu-mll/glue", "sst2", "train"): train, ("nyu-mll/glue", "sst2", "validation"): test})
    out = build_cl_benchmark(tmp_path / "CL", tasks=["sst-2"], load_dataset=hub)
    counts = {
        split: Counter(r["label"] for r in read(out / "SC/SST-2" / f"{split}.json"))
        for split in ("train", "dev", "test")
    }
    assert counts == {
        "train": {"Bad": 800, "Good": 24},
        "dev": {"Bad": 200, "Good": 6},
        "test": {"Good": 500, "Bad": 5},
    }
    train_texts = {r["sentence"] for r in read(out / "SC/SST-2/train.json")}
    assert not train_texts & {r["sentence"] for r in read(out / "SC/SST-2/dev.json")}
    assert all(text.startswith("Text: s") for text in train_texts)


def one_row(**row):
    return Dataset.from_list([row])


def test_label_ids_map_by_meaning_and_texts_follow_the_release_formats(tmp_path):
    hub = fake_hub(
        {
            ("nyu-mll/glue", "mnli", "validation_matched"): one_row(premise="P.", hypothesis="H.", label=0),
            ("aps/super_glue", "copa", "validation"): one_row(
                premise="It rained.", question="effect", choice1="Wet.", choice2="Dry.", label=1
            ),
            ("community-datasets/yahoo_answers_topics", None, "test"): Dataset.from_list(
                [
                    {"question_title": "T1", "question_content": "C1", "best_answer": "A1", "topic": 5},
                    {"question_title": "T2", "question_content": "", "best_answer": "A2", "topic": 0},
                ]
            ),
            (SOURCES["amazon"].hub, None, "test"): one_row(review_title="Meh", review_text="Broke.", class_index=1),
        }
    )
    out = build_cl_benchmark(tmp_path / "CL", tasks=["mnli", "copa", "yahoo", "amazon"], load_dataset=hub)
    assert read(out / "NLI/MNLI/test.json") == [{"sentence": "sentence 1: P.\nsentence 2: H.", "label": "entailment"}]
    assert read(out / "COPA/COPA/test.json") == [
        {
            "sentence": 'Which sentence is the effect of "It rained."? Choose one between A and B.\nA: Wet.\nB: Dry.',
            "label": "B",
        }
    ]
    assert read(out / "TC/yahoo/test.json") == [
        {"sentence": "Title: T1\nQuestion: C1\nAnswer: A1\n", "label": "Sports"},
        {"sentence": "Question: T2\nAnswer: A2\n", "label": "Society & Culture"},
    ]
    assert read(out / "SC/amazon/test.json") == [{"sentence": "Title: Meh\nText: Broke.\n", "label": "very negative"}]


def test_tasks_json_lists_only_the_orders_whose_tasks_were_built(tmp_path):
    sc = build_cl_benchmark(tmp_path / "SC", tasks=PAPER_ORDERS[1], load_dataset=fake_hub())
    assert sorted(read(sc / "tasks.json")["orders"]) == ["1", "2", "3"]
    single = build_cl_benchmark(tmp_path / "one", tasks=["cb"], load_dataset=fake_hub())
    assert read(single / "tasks.json")["orders"] == {} and list(read(single / "tasks.json")["tasks"]) == ["cb"]
    assert list(load_cl_benchmark(single).tasks) == ["cb"]


def test_failed_build_leaves_nothing_behind(tmp_path):
    def flaky(path, name=None, split=None):
        if path == "aps/super_glue":
            raise ConnectionError("the hub cannot be reached\nmore details")
        return fake_hub()(path, name, split)

    with pytest.raises(
        JumpLoRAError, match=r"could not load aps/super_glue \(cb\) split 'train' for task cb: the hub"
    ):
        build_cl_benchmark(tmp_path / "CL", tasks=["rte", "cb"], load_dataset=flaky)
    assert list(tmp_path.iterdir()) == []


def test_missing_column_names_the_dataset_and_column(tmp_path):
    hub = fake_hub({("fancyzhx/ag_news", None, "train"): Dataset.from_dict({"txt": ["a"], "label": [0]})})
    with pytest.raises(JumpLoRAError, match=r"fancyzhx/ag_news split 'train' for task agnews lacks column\(s\) text"):
        build_cl_benchmark(tmp_path / "CL", tasks=["agnews"], load_dataset=hub)
    assert list(tmp_path.iterdir()) == []


def test_refuses_an_existing_output_and_unknown_tasks(tmp_path):
    (tmp_path / "CL").mkdir()
    with pytest.raises(JumpLoRAError, match="already exists"):
        build_cl_benchmark(tmp_path / "CL", load_dataset=fake_hub())
    with pytest.raises(JumpLoRAError, match="unknown task.*squad"):
        build_cl_benchmark(tmp_path / "new", tasks=["squad"], load_dataset=fake_hub())


def test_same_seed_same_files(tmp_path):
    first, again, other = (
        build_cl_benchmark(tmp_path / name, tasks=["yelp"], seed=seed, load_dataset=fake_hub())
        for name, seed in (("a", 5), ("b", 5), ("c", 6))
    )
    files = [(folder / "SC/yelp/train.json").read_bytes() for folder in (first, again, other)]
    assert files[0] == files[1] != files[2]


def test_asks_the_hub_for_the_documented_splits(tmp_path):
    calls = []
    build_cl_benchmark(tmp_path / "CL", tasks=["mnli", "imdb"], load_dataset=fake_hub(calls=calls))
    assert calls == [
        ("nyu-mll/glue", "mnli", "train"),
        ("nyu-mll/glue", "mnli", "validation_matched"),
        ("stanfordnlp/imdb", None, "train"),
        ("stanfordnlp/imdb", None, "test"),
    ]
