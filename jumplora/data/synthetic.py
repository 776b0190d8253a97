"""A small synthetic stand-in for the 15-task benchmark: same task names, options, instructions and orders.

Every example is 10-25 words: 3-5 *cue words* of its class among filler words, laid out in the task's real
format ("Title: ...\\nText: ...", "sentence 1: ...\\nsentence 2: ...", COPA's question, ...). Inside one task
every cue word belongs to exactly one class, so the class follows from the cue words alone (a noiseless rule).

Related tasks interfere the way real ones do. Tasks form families (sentiment: amazon, yelp, imdb, sst-2; topic:
dbpedia, yahoo, agnews; NLI: mnli, cb, rte; yes/no: wic, copa, qqp, boolqa, multirc) whose labels name shared
*concepts* (imdb's "Good" is the sentiment concept "positive"; yahoo's "Sports", agnews' "Sports" and dbpedia's
"Athlete" are the topic "sports"; "True" and copa's "A" are "yes"). Each concept of a family owns a bank of five
pseudo-words: one *core* word and four *contested* words. Per task, a class of concept q gets as cues:
  - q's core word (same meaning in every task: what related tasks share),
  - two of q's contested words (which two is drawn per task),
  - the other two contested words of another concept r = π(q), where π is a per-task derangement (a shuffled
    cycle) of the task's concepts.
So a contested word means its own concept in one task and a different one in another: training a later task of
the family rewrites the cue -> label mapping an earlier task relies on, and shared label words ("Sports",
"True", "neutral", ...) pull the answers of different tasks together. Filler words are English function words,
family words and a few words of the task's own (so a model can, in principle, tell the tasks apart).

Everything comes from `random.Random` seeded with strings made of `seed` (no global random state): the same seed
gives byte-identical examples and fingerprint.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from jumplora.data.cl_benchmark import make_benchmark
from jumplora.data.tasks import DEFAULT_TASK_SPECS, PAPER_ORDERS
from jumplora.data.types import Benchmark, Example, TaskData, TaskSpec

FAMILIES: dict[str, tuple[str, ...]] = {"sentiment": ("amazon", "yelp", "imdb", "sst-2"),
                                        "topic": ("dbpedia", "yahoo", "agnews"), "nli": ("mnli", "cb", "rte"),
                                        "yes/no": ("wic", "copa", "qqp", "boolqa", "multirc")}
# Labels naming the same concept as a differently spelled label of a related task (see `concept_of`).
CONCEPT_OF_LABEL: dict[str, str] = {"Good": "positive", "Bad": "negative", "True": "yes", "A": "yes", "False": "no",
                                    "B": "no", "Athlete": "sports", "Company": "business",
                                    "Business & Finance": "business", "Office Holder": "politics",
                                    "Politics & Government": "politics", "World": "politics",
                                    "Educational Institution": "education", "Education & Reference": "education",
                                    "Artist": "entertainment", "Entertainment & Music": "entertainment",
                                    "Science & Mathematics": "science", "Science or Technology": "science"}
CONTESTED_PER_CONCEPT = 4
MIN_WORDS, MAX_WORDS = 10, 25
MIN_CUES, MAX_CUES = 3, 5
MIN_PRETRAINING_CLASSES = 4
FAMILY_FILLERS, TASK_FILLERS = 30, 10
ENGLISH_FILLERS = ["the", "a", "an", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "with", "as",
                   "at", "by", "this", "from", "or", "be", "are", "were", "has", "had", "not", "but", "all", "they",
                   "we", "you", "one", "so", "some", "what", "there", "when", "which", "their", "more", "about", "out",
                   "up"]

_FORMATS: dict[str, str] = {
    **dict.fromkeys(("dbpedia", "amazon", "agnews"), "Title: {0}\nText: {1}\n"),
    "yahoo": "Question: {0}\nAnswer: {1}\n",
    "yelp": "Text: {0}\n",
    "sst-2": "Text: {0} ",
    "imdb": "{0}",
    **dict.fromkeys(("mnli", "cb", "rte"), "sentence 1: {0}\nsentence 2: {1}"),
    "wic": "word: {0}\n{1}\n{2}",
    "copa": 'Which sentence is the {kind} of "{0}"? Choose one between A and B.\nA: {1}\nB: {2}',
    "qqp": "first sentence: {0}\nsecond sentence: {1}",
    "boolqa": "question: {0}\npassage: {1}",
    "multirc": "paragraph: {0}\nquestion: {1}\ncandidate answer: {2}",
}


def synthetic_benchmark(seed: int = 0, train_per_task: int = 2048, dev_per_task: int = 64,
                        test_per_task: int = 100) -> Benchmark:
    """The 15 tasks with balanced classes (counts differ by at most one) and the paper's six orders."""
    lexicon = _lexicon(seed)
    sizes = {"train": train_per_task, "dev": dev_per_task, "test": test_per_task}
    tasks = {}
    for name, spec in DEFAULT_TASK_SPECS.items():
        cues, fillers = lexicon.cues[name], lexicon.fillers[name]
        rng, seen = random.Random(f"synthetic/{seed}/{name}"), set()  # `seen`: no text repeated within the task
        splits = {split: _examples(spec, cues, fillers, size, seen, rng) for split, size in sizes.items()}
        tasks[name] = TaskData(spec, **splits)
    return make_benchmark("synthetic", tasks, dict(PAPER_ORDERS), [])


def pretraining_examples(seed: int = 0, per_class: int = 256) -> dict[str, list[Example]]:
    """The tiny preset's supervised mixture: per task, `per_class` fresh examples per class (at least
    MIN_PRETRAINING_CLASSES classes' worth, for copa's "A"/"B") whose cue words are the five words of the class's own
    concept bank, the lexicon's *plain* meanings (docs/DECISIONS.md, "Tiny preset pre-training")."""
    lexicon = _lexicon(seed)
    examples = {}
    for name, spec in DEFAULT_TASK_SPECS.items():
        plain_cues = {label: lexicon.banks[family_of(name), concept_of(label)] for label in spec.options}
        rng = random.Random(f"synthetic/{seed}/pretraining/{name}")
        size = per_class * max(len(spec.options), MIN_PRETRAINING_CLASSES)
        examples[name] = _examples(spec, plain_cues, lexicon.fillers[name], size, set(), rng)
    return examples


def concept_of(label: str) -> str:
    """The concept a label names: from CONCEPT_OF_LABEL, else the label in lower case ("Sports" -> "sports")."""
    return CONCEPT_OF_LABEL.get(label, label.lower())


def family_of(task: str) -> str:
    return next(family for family, members in FAMILIES.items() if task in members)


@dataclass(frozen=True)
class _Lexicon:
    banks: dict[tuple[str, str], list[str]]  # (family, concept) -> [core word, contested words...]
    cues: dict[str, dict[str, list[str]]]  # task -> label -> cue words
    fillers: dict[str, list[str]]  # task -> filler words


def _lexicon(seed: int) -> _Lexicon:
    """Every concept bank, then per task: label -> cue words, and the task's filler words."""
    rng = random.Random(f"synthetic/{seed}/lexicon")
    new_words = _pseudo_words(rng)
    banks: dict[tuple[str, str], list[str]] = {}
    cues: dict[str, dict[str, list[str]]] = {}
    for name, spec in DEFAULT_TASK_SPECS.items():
        family = family_of(name)
        concepts = {label: concept_of(label) for label in spec.options}
        for concept in concepts.values():
            banks.setdefault((family, concept), [next(new_words) for _ in range(1 + CONTESTED_PER_CONCEPT)])
        cues[name] = _task_cues(concepts, {c: banks[family, c] for c in concepts.values()}, rng)
    family_fillers = {family: [next(new_words) for _ in range(FAMILY_FILLERS)] for family in FAMILIES}
    fillers = {
        name: ENGLISH_FILLERS + family_fillers[family_of(name)] + [next(new_words) for _ in range(TASK_FILLERS)]
        for name in DEFAULT_TASK_SPECS
    }
    return _Lexicon(banks, cues, fillers)


def _task_cues(concepts: dict[str, str], banks: dict[str, list[str]], rng: random.Random) -> dict[str, list[str]]:
    """label -> [core word of its concept q, two contested words of q, two contested words of π(q)]."""
    half = CONTESTED_PER_CONCEPT // 2
    own, lent = {}, {}
    for concept, (_core, *contested) in banks.items():
        drawn = rng.sample(contested, len(contested))
        own[concept], lent[concept] = drawn[:half], drawn[half:]
    cycle = rng.sample(list(banks), len(banks))
    deranged = {concept: cycle[(i + 1) % len(cycle)] for i, concept in enumerate(cycle)}
    return {label: [banks[q][0], *own[q], *lent[deranged[q]]] for label, q in concepts.items()}


def _pseudo_words(rng: random.Random) -> Iterator[str]:
    """Endless distinct pronounceable words of 2-3 consonant-vowel syllables (never an English filler)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    used = set(ENGLISH_FILLERS)
    while True:
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 3)))
        if word not in used:
            used.add(word)
            yield word


def _examples(spec: TaskSpec, cues: dict[str, list[str]], fillers: list[str], size: int, seen: set[str],
              rng: random.Random) -> list[Example]:
    """`size` examples, classes balanced, no text repeated within the task (`seen` spans its splits)."""
    per_class, extra = divmod(size, len(spec.options))
    examples = []
    for index, label in enumerate(spec.options):
        for _ in range(per_class + (index < extra)):
            examples.append(Example(text=_text(spec.name, cues[label], fillers, seen, rng), label=label))
    rng.shuffle(examples)
    return examples


def _text(task: str, cue_words: list[str], fillers: list[str], seen: set[str], rng: random.Random) -> str:
    """Some of the class's cue words among fillers, split into the fields of the task's format: drawn again until
    it is none of the texts in `seen`, which it then joins."""
    template = _FORMATS[task]
    field_count = template.count("{") - template.count("{kind}")
    single_word_first = task == "wic"  # "word: <one word>" then two sentences
    while True:
        chosen = rng.sample(cue_words, rng.randint(MIN_CUES, MAX_CUES))
        words = chosen + [rng.choice(fillers) for _ in range(rng.randint(MIN_WORDS, MAX_WORDS) - len(chosen))]
        rng.shuffle(words)
        fields = words[:single_word_first] + _cut(words[single_word_first:], field_count - single_word_first, rng)
        text = template.format(*fields, kind=rng.choice(("cause", "effect")))
        if text not in seen:
            seen.add(text)
            return text


def _cut(words: list[str], parts: int, rng: random.Random) -> list[str]:
    """`words` cut at random into `parts` non-empty runs, each joined with spaces."""
    cuts = [0, *sorted(rng.sample(range(1, len(words)), parts - 1)), len(words)]
    return [" ".join(words[start:end]) for start, end in zip(cuts, cuts[1:], strict=False)]
