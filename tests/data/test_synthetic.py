import random
import re
from collections import Counter, defaultdict

import pytest

from jumplora.data import SYNTHETIC_DATA_SEED, load_benchmark
from jumplora.data.synthetic import synthetic_benchmark
from jumplora.data.tasks import DEFAULT_TASK_SPECS, PAPER_ORDERS
from jumplora.data.validate import validate_task

SPLITS = ("train", "dev", "test")


@pytest.fixture(scope="module")
def benchmark():
    return synthetic_benchmark(seed=0)


def words(text):
    return re.findall(r"[\w&-]+", text)


def indicator_words(examples):
    """Words seen at least 3 times in train, always with the same label -> that label."""
    labels_of = defaultdict(Counter)
    for example in examples:
        for word in set(words(example.text)):
            labels_of[word][example.label] += 1
    return {w: next(iter(c)) for w, c in labels_of.items() if len(c) == 1 and c.total() >= 3}


def test_same_tasks_options_and_orders_as_the_paper(benchmark):
    assert benchmark.name == "synthetic"
    assert {name: task.spec for name, task in benchmark.tasks.items()} == DEFAULT_TASK_SPECS
    assert benchmark.orders == PAPER_ORDERS


def test_sizes_and_balanced_classes(benchmark):
    for task in benchmark.tasks.values():
        assert [len(task.split(split)) for split in SPLITS] == [2048, 64, 100]
        for split in SPLITS:
            counts = Counter(example.label for example in task.split(split))
            assert set(counts) == set(task.spec.options)
            assert max(counts.values()) - min(counts.values()) <= 1


def test_sizes_are_arguments():
    small = synthetic_benchmark(seed=3, train_per_task=30, dev_per_task=15, test_per_task=14)
    assert {(len(t.train), len(t.dev), len(t.test)) for t in small.tasks.values()} == {(30, 15, 14)}


def test_same_seed_gives_identical_data_whatever_the_global_random_state():
    random.seed(1)
    first = synthetic_benchmark(seed=7, train_per_task=20, dev_per_task=5, test_per_task=5)
    random.seed(2)
    random.random()
    second = synthetic_benchmark(seed=7, train_per_task=20, dev_per_task=5, test_per_task=5)
    assert first.tasks == second.tasks and first.fingerprint == second.fingerprint
    other = synthetic_benchmark(seed=8, train_per_task=20, dev_per_task=5, test_per_task=5)
    assert other.fingerprint != first.fingerprint and other.tasks["cb"].train != first.tasks["cb"].train


def test_texts_are_10_to_25_words_in_the_tasks_formats(benchmark):
    template_words = {
        "dbpedia": 2,
        "amazon": 2,
        "agnews": 2,
        "yahoo": 2,
        "yelp": 1,
        "sst-2": 1,
        "imdb": 0,
        "mnli": 4,
        "cb": 4,
        "rte": 4,
        "wic": 1,
        "qqp": 4,
        "boolqa": 2,
        "multirc": 4,
        "copa": 14,
    }
    for name, task in benchmark.tasks.items():
        for example in task.train:
            assert 10 <= len(example.text.split()) - template_words[name] <= 25, (name, example.text)
    assert all(re.fullmatch(r"sentence 1: [^\n]+\nsentence 2: [^\n]+", e.text) for e in benchmark.tasks["mnli"].test)
    assert all(re.fullmatch(r"word: \w+\n[^\n]+\n[^\n]+", e.text) for e in benchmark.tasks["wic"].test)
    assert all(re.fullmatch(r"Title: [^\n]+\nText: [^\n]+\n", e.text) for e in benchmark.tasks["dbpedia"].test)
    copa = r'Which sentence is the (cause|effect) of "[^\n"]+"\? Choose one between A and B\.\nA: [^\n]+\nB: [^\n]+'
    assert all(re.fullmatch(copa, e.text) for e in benchmark.tasks["copa"].test)
    multirc = r"paragraph: [^\n]+\nquestion: [^\n]+\ncandidate answer: [^\n]+"
    assert all(re.fullmatch(multirc, e.text) for e in benchmark.tasks["multirc"].test)


def test_data_is_clean_for_the_validator(benchmark):
    for task in benchmark.tasks.values():
        _, reports = validate_task(task.spec, {split: task.split(split) for split in SPLITS})
        assert [report.problems for report in reports] == [0, 0, 0]


def test_a_bag_of_words_vote_learns_every_task(benchmark):
    for name, task in benchmark.tasks.items():
        indicators = indicator_words(task.train)
        correct = 0
        for example in task.test:
            votes = Counter(indicators[w] for w in words(example.text) if w in indicators)
            correct += bool(votes) and votes.most_common(1)[0][0] == example.label
        assert correct / len(task.test) >= 0.9, name


@pytest.mark.parametrize(
    "pair",
    [
        ("amazon", "yelp"),
        ("imdb", "sst-2"),
        ("mnli", "cb"),
        ("wic", "boolqa"),
        ("qqp", "multirc"),
        ("boolqa", "multirc"),
    ],
)
def test_related_tasks_share_cue_words_partly_with_conflicting_labels(benchmark, pair):
    first, second = (indicator_words(benchmark.tasks[name].train) for name in pair)
    shared = set(first) & set(second)
    agreeing = {w for w in shared if first[w] == second[w]}
    assert agreeing, "related tasks share some cue words with the same label"
    assert shared - agreeing, "and some shared cue words with a different label"


def test_topic_tasks_share_the_sports_label_and_its_cues(benchmark):
    yahoo, agnews = (indicator_words(benchmark.tasks[name].train) for name in ("yahoo", "agnews"))
    sports_cues = {w for w, label in yahoo.items() if label == "Sports"}
    assert sports_cues & {w for w, label in agnews.items() if label == "Sports"}


def test_unrelated_tasks_share_no_cue_words(benchmark):
    sentiment, nli = (indicator_words(benchmark.tasks[name].train) for name in ("amazon", "mnli"))
    assert not set(sentiment) & set(nli)


def test_load_benchmark_without_a_folder_gives_the_capped_synthetic_tasks():
    full = synthetic_benchmark(SYNTHETIC_DATA_SEED)
    capped = load_benchmark(None, seed=1, max_train_per_task=20, max_eval_per_task=10, tasks=["cb", "imdb"])
    assert list(capped.tasks) == ["cb", "imdb"] and capped.orders == PAPER_ORDERS and capped.name == "synthetic"
    for name, task in capped.tasks.items():
        assert (len(task.train), len(task.dev), len(task.test)) == (20, 10, 10)
        assert set(task.train) <= set(full.tasks[name].train) and set(task.test) <= set(full.tasks[name].test)
    assert Counter(e.label for e in capped.tasks["imdb"].train) == {"Good": 10, "Bad": 10}
    again = load_benchmark(None, seed=1, max_train_per_task=20, max_eval_per_task=10, tasks=["cb", "imdb"])
    assert again.fingerprint == capped.fingerprint != full.fingerprint
    loaded = load_benchmark(None)
    for name, task in loaded.tasks.items():
        generated, classes = full.tasks[name], len(task.spec.options)
        assert task.test == generated.test
        if classes > 2:
            assert (task.train, task.dev) == (generated.train, generated.dev)
        else:  # a pool of 2048 + 64 > 1000 per class: the protocol keeps 1000 per class and re-splits it 80/20
            assert (len(task.train), len(task.dev)) == (1600, 400)
            assert set(task.train) | set(task.dev) <= set(generated.train) | set(generated.dev)
