"""What the tiny preset is pre-trained on, as T5 was on span corruption plus a supervised mixture of prompts: the
data source's texts, and (prompt, answer) pairs in the tasks' prompt format (`encode.prompt_source`): the synthetic
tasks with the lexicon's plain word meanings, or for real data the answer-format pairs (docs/DECISIONS.md, "Tiny
preset pre-training"). `Corpus` holds both as token ids for the pre-training loop.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerFast

from jumplora.data import SYNTHETIC_DATA_SEED
from jumplora.data.encode import prompt_source
from jumplora.data.synthetic import pretraining_examples
from jumplora.data.types import Benchmark
from jumplora.tiny.tokenizer import is_option

TINY_CORPUS_TEXTS_PER_TASK = 600
ANSWER_FORMAT_PER_TASK = 512
PARAGRAPH_MAX_WORDS = 16


def tokenizer_corpus(source: Benchmark) -> list[str]:
    """The texts the tiny preset is built from: every instruction and option of the data source, and per task a
    seeded sample of at most TINY_CORPUS_TEXTS_PER_TASK example texts (all of the synthetic benchmark's), whatever
    the run's caps (docs/DECISIONS.md, "Tiny preset corpus")."""
    texts = []
    for name, task in source.tasks.items():
        examples = sorted(ex.text for split in (task.train, task.dev, task.test) for ex in split)
        if len(examples) > TINY_CORPUS_TEXTS_PER_TASK:
            examples = random.Random(f"tiny-corpus/{name}").sample(examples, TINY_CORPUS_TEXTS_PER_TASK)
        texts += [task.spec.instruction, *task.spec.options, *examples]
    return [text for text in texts if text.strip()]


def supervised_mixture(source: Benchmark, seed: int) -> list[tuple[str, str]]:
    """(prompt, answer) pairs: the synthetic tasks with plain meanings, or answer-format pairs for real data."""
    if source.name == "synthetic":
        return [
            (prompt_source(source.tasks[task].spec, example.text), example.label)
            for task, examples in pretraining_examples(SYNTHETIC_DATA_SEED).items()
            for example in examples
        ]
    return [pair for name in source.tasks for pair in answer_format_pairs(source, name, seed)]


def answer_format_pairs(source: Benchmark, task: str, seed: int) -> list[tuple[str, str]]:
    """ANSWER_FORMAT_PER_TASK of the task's own prompts (instruction, options, the first PARAGRAPH_MAX_WORDS words of
    a training text) answered by an option drawn uniformly at random, never by the text's label: the base learns the
    answer format (one listed option, then end of sequence) and nothing about the task itself."""
    rng = random.Random(f"answer-format/{seed}/{task}")
    spec = source.tasks[task].spec
    texts = [ex.text for ex in source.tasks[task].train]
    if not texts:
        return []
    return [(prompt_source(spec, " ".join(rng.choice(texts).split()[:PARAGRAPH_MAX_WORDS])), rng.choice(spec.options))
            for _ in range(ANSWER_FORMAT_PER_TASK)]


class Corpus:
    """The texts as token ids (without `</s>`), short texts and word n-grams usable as answer options, and the
    supervised (prompt, answer) pairs as token ids."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, texts: list[str], supervised: list[tuple[str, str]],
                 max_supervised_source_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.texts = texts
        self.token_ids = [ids for ids in tokenizer(texts, add_special_tokens=False)["input_ids"] if ids]
        self.options = [text.strip() for text in texts if is_option(text)]
        self.sentinel_ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(32)])
        self.eos_id = tokenizer.eos_token_id
        self.supervised: list[tuple[list[int], list[int]]] = []
        if supervised:
            sources, answers = zip(*supervised, strict=True)
            encoded = tokenizer(list(sources), text_target=list(answers), truncation=True,
                                max_length=max_supervised_source_tokens)
            self.supervised = list(zip(encoded["input_ids"], encoded["labels"], strict=True))

    def window(self, rng: random.Random, length: int) -> list[int]:
        ids = rng.choice(self.token_ids)
        start = rng.randrange(max(1, len(ids) - length + 1))
        return ids[start : start + length]

    def option(self, rng: random.Random, real_share: float) -> str:
        if self.options and rng.random() < real_share:
            return rng.choice(self.options)
        words = rng.choice(self.texts).split()
        length = rng.randint(1, min(3, len(words)))
        start = rng.randrange(len(words) - length + 1)
        return " ".join(words[start : start + length])
