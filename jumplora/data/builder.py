"""Build a CL_Benchmark folder from the original public datasets on the Hugging Face Hub.

Writes `<out_dir>/tasks.json` and `<out_dir>/<task path>/{train,dev,test,labels}.json` in the layout that
`load_cl_benchmark` reads, with the SPEC §4 protocol: the source's train split gives a pool of at most 1000
examples per class (a seeded random choice), split 80/20 per class into train/dev; the source's evaluation split
gives test, at most 500 per class. Rows whose label has no option (e.g. the -1 of unlabelled rows) are skipped.
`SOURCES` names each task's hub dataset (and config), test split and label map (raw label -> option).

GLUE/SuperGLUE test labels are hidden, so their validation split is the test set (as in the public release);
RTE's "not_entailment" is the option "contradiction". The texts are laid out as in the release (templates in
`SOURCES`: "Title: ...", "sentence 1: ...", COPA's question with "A: ..." and "B: ...", ...); yahoo writes
Title/Question/Answer, or Question/Answer when the question has no body. Known differences from the release:
the hub's agnews joins title and description, so it is written as "Text: ..." only; the release's MNLI test also
holds 131 unlabelled "-" rows (the loader drops them anyway). If a hub copy moves or renames a column, the build
stops with a message naming the task, the dataset and the column: update `SOURCES`.
"""

from __future__ import annotations

import json
import logging
import random
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jumplora.data.cl_benchmark import (
    POOL_PER_CLASS,
    TEST_PER_CLASS,
    TRAIN_FRACTION,
    sample_per_class,
    select_tasks,
    split_per_class,
)
from jumplora.data.tasks import DEFAULT_TASK_SPECS, PAPER_ORDERS, TASK_KEYS
from jumplora.data.types import TaskSpec
from jumplora.errors import JumpLoRAError
from jumplora.ownership import DATA, Target, written

Row = Mapping[str, Any]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """Where a task's examples come from and how a row becomes the example text."""

    hub: str
    config: str | None
    test_split: str
    labels: Mapping[Any, str]  # raw label value -> option; rows with other values are skipped
    columns: tuple[str, ...]  # the text columns that `render` reads
    render: Callable[[Row], str]
    label_column: str = "label"


def _templated(hub: str, config: str | None, test_split: str, labels: Mapping[Any, str], *, template: str,
               label_column="label") -> Source:
    """A Source whose text is `template` filled with the row's columns."""
    columns = tuple(field for _, field, _, _ in string.Formatter().parse(template) if field)
    return Source(hub, config, test_split, labels, columns, lambda row: template.format(**row), label_column)


def _yahoo_text(row: Row) -> str:
    if row["question_content"]:
        question = f"Title: {row['question_title']}\nQuestion: {row['question_content']}"
    else:
        question = f"Question: {row['question_title']}"
    return f"{question}\nAnswer: {row['best_answer']}\n"


def _in_order(task: str) -> dict[int, str]:
    return dict(enumerate(DEFAULT_TASK_SPECS[task].options))


_FALSE_TRUE = {0: "False", 1: "True"}
_BAD_GOOD = {0: "Bad", 1: "Good"}
_NLI_PAIR = "sentence 1: {premise}\nsentence 2: {hypothesis}"
_AMAZON = "yassiracharki/Amazon_Reviews_for_Sentiment_Analysis_fine_grained_5_classes"
_COPA = 'Which sentence is the {question} of "{premise}"? Choose one between A and B.\nA: {choice1}\nB: {choice2}'
_YAHOO_COLUMNS = ("question_title", "question_content", "best_answer")

SOURCES: dict[str, Source] = {
    "dbpedia": _templated("fancyzhx/dbpedia_14", None, "test", _in_order("dbpedia"),
                          template="Title: {title}\nText: {content}\n"),
    "amazon": _templated(_AMAZON, None, "test", dict(enumerate(DEFAULT_TASK_SPECS["amazon"].options, start=1)),
                         template="Title: {review_title}\nText: {review_text}\n", label_column="class_index"),
    "yahoo": Source("community-datasets/yahoo_answers_topics", None, "test", _in_order("yahoo"),
                    _YAHOO_COLUMNS, _yahoo_text, label_column="topic"),
    "agnews": _templated("fancyzhx/ag_news", None, "test", _in_order("agnews"), template="Text: {text}\n"),
    "yelp": _templated("Yelp/yelp_review_full", None, "test", _in_order("yelp"), template="Text: {text}\n"),
    "mnli": _templated("nyu-mll/glue", "mnli", "validation_matched",
                       {0: "entailment", 1: "neutral", 2: "contradiction"}, template=_NLI_PAIR),
    "cb": _templated("aps/super_glue", "cb", "validation",
                     {0: "entailment", 1: "contradiction", 2: "neutral"}, template=_NLI_PAIR),
    "rte": _templated("nyu-mll/glue", "rte", "validation", {0: "entailment", 1: "contradiction"},
                      template="sentence 1: {sentence1}\nsentence 2: {sentence2}"),
    "wic": _templated("aps/super_glue", "wic", "validation", _FALSE_TRUE,
                      template="word: {word}\n{sentence1}\n{sentence2}"),
    "copa": _templated("aps/super_glue", "copa", "validation", {0: "A", 1: "B"}, template=_COPA),
    "qqp": _templated("nyu-mll/glue", "qqp", "validation", _FALSE_TRUE,
                      template="first sentence: {question1}\nsecond sentence: {question2}"),
    "boolqa": _templated("aps/super_glue", "boolq", "validation", _FALSE_TRUE,
                         template="question: {question}\npassage: {passage}"),
    "multirc": _templated("aps/super_glue", "multirc", "validation", _FALSE_TRUE,
                          template="paragraph: {paragraph}\nquestion: {question}\ncandidate answer: {answer}"),
    "imdb": _templated("stanfordnlp/imdb", None, "test", _BAD_GOOD, template="{text}"),
    "sst-2": _templated("nyu-mll/glue", "sst2", "validation", _BAD_GOOD, template="Text: {sentence}"),
}


def build_cl_benchmark(out_dir: str | Path, *, tasks: Iterable[str] | None = None, seed: int = 0,
                       load_dataset: Callable[..., Any] | None = None) -> Path:
    """Download (via `load_dataset(hub, config, split=...)`, default `datasets.load_dataset`), sample and write the
    tasks (all 15 by default) to `out_dir`, which must not exist yet. Built in a folder beside it, each file
    recorded as it is written (`ownership.Target`), and put in place only when complete; `tasks.json` lists the
    paper's orders whose tasks were all built."""
    out = Path(out_dir).expanduser()
    if out.exists():
        raise JumpLoRAError(f"{out} already exists: remove it or choose another output folder")
    names = select_tasks(DEFAULT_TASK_SPECS, tasks, "the builder's task list")
    load = load_dataset
    if load is None:
        try:
            from datasets import load_dataset as load
        except ImportError as error:
            message = "building the data needs the optional package 'datasets': pip install 'jumplora[build-data]'"
            raise JumpLoRAError(message) from error
    with Target(out, DATA, "jumplora data build", "--out", aside=True) as target:  # in place once complete
        for number, name in enumerate(names, 1):
            logger.info("task %d/%d: %s from %s", number, len(names), name, SOURCES[name].hub)
            _write_task(target.path, DEFAULT_TASK_SPECS[name], SOURCES[name], load, seed)
        _write_json(target.path / "tasks.json", _tasks_json(names))
    return out


def _write_task(root: Path, spec: TaskSpec, source: Source, load: Callable[..., Any], seed: int) -> None:
    rng = random.Random(f"{seed}/{spec.name}/build")
    pool_rows = _labelled_rows(_load_split(spec.name, source, "train", load), source, POOL_PER_CLASS, rng)
    train, dev = split_per_class([row["label"] for row in pool_rows], TRAIN_FRACTION, rng)
    test_rows = _labelled_rows(_load_split(spec.name, source, source.test_split, load), source, TEST_PER_CLASS, rng)
    folder = root / spec.path
    _write_json(folder / "train.json", [pool_rows[index] for index in train])
    _write_json(folder / "dev.json", [pool_rows[index] for index in dev])
    _write_json(folder / "test.json", test_rows)
    _write_json(folder / "labels.json", list(spec.options))


def _load_split(task: str, source: Source, split: str, load: Callable[..., Any]) -> Any:
    config = f" ({source.config})" if source.config else ""
    where = f"{source.hub}{config} split {split!r} for task {task}"
    try:
        dataset = load(source.hub, source.config, split=split)
    except Exception as error:  # network, hub and cache errors all end the build the same way
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        hint = "check the network, or the name in jumplora.data.builder.SOURCES"
        raise JumpLoRAError(f"could not load {where}: {reason}: {hint}") from error
    missing = [column for column in (source.label_column, *source.columns) if column not in dataset.column_names]
    if missing:
        found = ", ".join(dataset.column_names)
        hint = "update jumplora.data.builder.SOURCES"
        raise JumpLoRAError(f"{where} lacks column(s) {', '.join(missing)} (has {found}): {hint}")
    return dataset


def _labelled_rows(dataset: Any, source: Source, per_class: int, rng: random.Random) -> list[dict[str, str]]:
    """At most `per_class` rows of every label that has an option, as {"sentence", "label"} records."""
    raw_labels = list(dataset[source.label_column])
    usable = [index for index, label in enumerate(raw_labels) if label in source.labels]
    chosen = sample_per_class([raw_labels[index] for index in usable], per_class, rng)
    rows = dataset.select([usable[index] for index in chosen])
    return [{"sentence": source.render(row), "label": source.labels[row[source.label_column]]} for row in rows]


def _tasks_json(names: list[str]) -> dict[str, Any]:
    built = set(names)
    orders = {str(order): list(tasks) for order, tasks in PAPER_ORDERS.items() if built.issuperset(tasks)}
    specs = {name: {key: getattr(DEFAULT_TASK_SPECS[name], key) for key in TASK_KEYS} for name in names}
    return {"orders": orders, "tasks": specs}


def _write_json(path: Path, content: Any) -> None:
    with written(path) as tmp:  # recorded in the folder's record (`ownership.Target`)
        tmp.write_text(json.dumps(content, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
