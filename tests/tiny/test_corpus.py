import random
import string
from collections import Counter

import pytest

from jumplora.data import SYNTHETIC_DATA_SEED, load_benchmark
from jumplora.data.encode import prompt_source
from jumplora.data.synthetic import pretraining_examples
from jumplora.data.types import Benchmark, Example, TaskData, TaskSpec
from jumplora.tiny.corpus import (
    ANSWER_FORMAT_PER_TASK,
    PARAGRAPH_MAX_WORDS,
    answer_format_pairs,
    supervised_mixture,
    tokenizer_corpus,
)


def text_of(rng: random.Random, index: int) -> str:
    """'Title: ... Text: ...' with 12-30 random words."""
    words = ["".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(rng.randint(12, 30))]
    return f"Title: item{index} Text: " + " ".join(words)


@pytest.fixture(scope="module")
def real_like() -> Benchmark:
    rng = random.Random(0)
    spec = TaskSpec("topics", "What is the topic?\n", ("Art", "Sports", "Science", "Politics", "Music"))
    train = [Example(text_of(rng, i), rng.choice(spec.options)) for i in range(60)]
    held_out = [Example(text_of(rng, 1000 + i), "Art") for i in range(10)]
    empty = TaskSpec("empty", "Same?\n", ("yes", "no"))
    tasks = {"topics": TaskData(spec, train, held_out[:5], held_out[5:]), "empty": TaskData(empty, [], [], [])}
    return Benchmark("folder", tasks, {1: ("topics",)}, "fp")


def test_answer_format_pairs_are_the_tasks_prompts_over_training_texts_with_a_uniform_random_option(real_like):
    task = real_like.tasks["topics"]
    pairs = answer_format_pairs(real_like, "topics", seed=0)
    assert len(pairs) == ANSWER_FORMAT_PER_TASK
    prompts = {prompt_source(task.spec, " ".join(ex.text.split()[:PARAGRAPH_MAX_WORDS])) for ex in task.train}
    assert {prompt for prompt, _ in pairs} <= prompts
    counts = Counter(answer for _, answer in pairs)
    assert set(counts) == set(task.spec.options)
    # 512 uniform draws over 5 options: each count is 102.4 ± 9.1 (binomial sd); 60 is 4.7 sd below
    assert min(counts.values()) >= 60


def test_answer_format_pairs_never_read_labels_or_held_out_texts(real_like):
    pairs = answer_format_pairs(real_like, "topics", seed=0)
    held_out = [" ".join(ex.text.split()[:PARAGRAPH_MAX_WORDS]) for ex in (*real_like.tasks["topics"].dev,
                                                                          *real_like.tasks["topics"].test)]
    assert not any(text in prompt for prompt, _ in pairs for text in held_out)
    original = real_like.tasks["topics"].train
    real_like.tasks["topics"].train = [Example(ex.text, "Art") for ex in original]
    try:
        assert answer_format_pairs(real_like, "topics", seed=0) == pairs
    finally:
        real_like.tasks["topics"].train = original


def test_answer_format_pairs_are_seeded_and_need_training_texts(real_like):
    assert answer_format_pairs(real_like, "topics", seed=0) == answer_format_pairs(real_like, "topics", seed=0)
    assert answer_format_pairs(real_like, "topics", seed=1) != answer_format_pairs(real_like, "topics", seed=0)
    assert answer_format_pairs(real_like, "empty", seed=0) == []
    assert supervised_mixture(real_like, seed=0) == answer_format_pairs(real_like, "topics", seed=0)


def test_synthetic_mixture_is_every_task_with_plain_meanings_in_its_prompt_format():
    source = load_benchmark(None, seed=0)
    mixture = supervised_mixture(source, seed=0)
    plain = pretraining_examples(SYNTHETIC_DATA_SEED)
    assert len(mixture) == sum(len(examples) for examples in plain.values()) == 256 * sum(
        max(len(task.spec.options), 4) for task in source.tasks.values())
    assert len(plain["copa"]) == 1024 and len(plain["dbpedia"]) == 256 * 14
    first, spec = plain["mnli"][0], source.tasks["mnli"].spec
    prompt = f"Task Instruction: {spec.instruction}\nOptions: {' | '.join(spec.options)}\nText: {first.text}\nAnswer:"
    assert (prompt, first.label) in mixture


def test_tokenizer_corpus_holds_instructions_options_and_a_sample_of_texts(real_like):
    corpus = tokenizer_corpus(real_like)
    assert "What is the topic?\n" in corpus and "Politics" in corpus and "Same?\n" in corpus
    every_text = {ex.text for task in real_like.tasks.values() for ex in (*task.train, *task.dev, *task.test)}
    assert every_text <= set(corpus)
