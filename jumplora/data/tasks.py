"""The 15 tasks of the Long Sequence benchmark, the paper's six task orders, and the reader of `tasks.json`.

`DEFAULT_TASK_SPECS` is what a CL_Benchmark folder without a `tasks.json` (and the synthetic benchmark) uses:
the same task names, paths and answer options, in the same order, as the `tasks.json` of the public release.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from jumplora.data.types import TaskSpec
from jumplora.errors import JumpLoRAError

PAPER_ORDERS: dict[int, tuple[str, ...]] = {
    1: ("dbpedia", "amazon", "yahoo", "agnews"),
    2: ("dbpedia", "amazon", "agnews", "yahoo"),
    3: ("yahoo", "amazon", "agnews", "dbpedia"),
    4: ("mnli", "cb", "wic", "copa", "qqp", "boolqa", "rte", "imdb",
        "yelp", "amazon", "sst-2", "dbpedia", "agnews", "multirc", "yahoo"),
    5: ("multirc", "boolqa", "wic", "mnli", "cb", "copa", "qqp", "rte",
        "imdb", "sst-2", "dbpedia", "agnews", "yelp", "amazon", "yahoo"),
    6: ("yelp", "amazon", "mnli", "cb", "copa", "qqp", "rte", "imdb",
        "sst-2", "dbpedia", "agnews", "yahoo", "multirc", "boolqa", "wic"),
}

BENCHMARK_ORDERS: dict[str, tuple[int, ...]] = {"sc": (1, 2, 3), "ls": (4, 5, 6)}  # SPEC §4: SC and LS

_TOPIC = "What is the topic of the following paragraph? Choose one from the option.\n"
_SENTIMENT = "What is the sentiment of the following paragraph? Choose one from the option.\n"
_NLI = 'What is the logical relationship between the "sentence 1" and the "sentence 2"? Choose one from the option.\n'
_FIVE_STARS = ("very negative", "negative", "neutral", "positive", "very positive")

DEFAULT_TASK_SPECS: dict[str, TaskSpec] = {
    name: TaskSpec(name, instruction, options, path)
    for name, path, instruction, options in (
        ("dbpedia", "TC/dbpedia", _TOPIC,
         ("Company", "Educational Institution", "Artist", "Athlete", "Office Holder", "Mean of Transportation",
          "Building", "Natural Place", "Village", "Animal", "Plant", "Album", "Film", "Written Work")),
        ("amazon", "SC/amazon", _SENTIMENT, _FIVE_STARS),
        ("yahoo", "TC/yahoo", _TOPIC,
         ("Society & Culture", "Science & Mathematics", "Health", "Education & Reference", "Computers & Internet",
          "Sports", "Business & Finance", "Entertainment & Music", "Family & Relationships",
          "Politics & Government")),
        ("agnews", "TC/agnews", _TOPIC, ("World", "Sports", "Business", "Science or Technology")),
        ("mnli", "NLI/MNLI", _NLI, ("neutral", "entailment", "contradiction")),
        ("cb", "NLI/CB", _NLI, ("entailment", "contradiction", "neutral")),
        ("wic", "WiC/WiC", "Given a word and two sentences, whether the word is used with the same sense in both "
         "sentence? Choose one from the option.\n", ("True", "False")),
        ("copa", "COPA/COPA", "", ("A", "B")),
        ("qqp", "QQP/QQP", 'Whether the "first sentence" and the "second sentence" have the same meaning? '
         "Choose one from the option.\n", ("False", "True")),
        ("boolqa", "BoolQA/BoolQA",
         "According to the following passage, is the question true or false? Choose one from the option.\n",
         ("True", "False")),
        ("rte", "NLI/RTE", _NLI, ("contradiction", "entailment")),
        ("imdb", "SC/IMDB", _SENTIMENT, ("Good", "Bad")),
        ("yelp", "SC/yelp", _SENTIMENT, _FIVE_STARS),
        ("sst-2", "SC/SST-2", _SENTIMENT, ("Good", "Bad")),
        ("multirc", "MultiRC/MultiRC", "According to the following passage and question, is the candidate "
         "answer true or false? Choose one from the option.\n", ("False", "True")),
    )
}

TaskTable = tuple[dict[int, tuple[str, ...]], dict[str, TaskSpec]]  # the orders, and the task specs by name
TASK_KEYS = ("path", "instruction", "options", "text_key", "label_key")  # a task's entry, as `data build` writes it
_REQUIRED_TASK_KEYS = TASK_KEYS[:3]
_STRING_FIELDS_AND_DEFAULTS = {"instruction": None, "path": None, "text_key": "sentence", "label_key": "label"}


def task_table(root: Path, allow_duplicate_keys: bool = False) -> TaskTable:
    """The orders and task specs of the folder `root`: its `tasks.json`'s, else the paper's."""
    if (root / "tasks.json").exists():
        return read_tasks_json(root / "tasks.json", allow_duplicate_keys)
    return dict(PAPER_ORDERS), dict(DEFAULT_TASK_SPECS)


def read_tasks_json(path: str | Path, allow_duplicate_keys: bool = False) -> TaskTable:
    """Read and check a `tasks.json`: `{"orders": {"1": [task, ...]}, "tasks": {name: {path, instruction, options,
    text_key?, label_key?}}}`. Returns the orders and the task specs, in file order. A key written twice in one
    object (a task named twice: JSON keeps the last) is refused unless `allow_duplicate_keys` (`jumplora data check`
    reports it, `duplicate_keys`, and goes on)."""
    path = Path(path)
    repeated = duplicate_keys(path)
    if repeated and not allow_duplicate_keys:
        raise JumpLoRAError(f"{path}: {repeated[0]}: JSON keeps only the last one, so the earlier entry would be "
                            "silently replaced: rename or remove one of them")
    content = read_json(path, dict, "a CL_Benchmark folder needs its tasks.json (or none at all)",
                        "fix or remove the file", "a JSON object with 'orders' and 'tasks'")
    if not isinstance(content.get("orders"), dict):
        raise JumpLoRAError(f"{path}: needs an object under 'orders' (order number -> list of task names)")
    if not isinstance(content.get("tasks"), dict) or not content["tasks"]:
        raise JumpLoRAError(f"{path}: needs a non-empty object under 'tasks' (name -> path, instruction, options)")
    specs = {name: _parse_task(path, name, entry) for name, entry in content["tasks"].items()}
    orders = dict(sorted(_parse_order(path, key, value, specs) for key, value in content["orders"].items()))
    return orders, specs


def duplicate_keys(path: Path) -> list[str]:
    """Each key written more than once in one object of the JSON file `path`, described in words ([] for a file that
    is missing or not JSON: `read_json` says so)."""
    found: list[str] = []

    def record(pairs: list[tuple[str, Any]]) -> dict:
        counts = Counter(key for key, _ in pairs)
        found.extend(f"the key {key!r} appears {count} times in one object" for key, count in counts.items()
                     if count > 1)
        return dict(pairs)

    try:
        json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=record)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    return found


def read_json(path: Path, kind: type, missing: str, fix: str, shape: str) -> Any:
    """The JSON value of `path`, which must be of type `kind`; one clear error otherwise. `missing` says what needs
    the file, `fix` what to do with an unreadable one, `shape` what the top level must be."""
    if not path.is_file():
        raise JumpLoRAError(f"missing file {path}: {missing}")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise JumpLoRAError(f"{path} is not valid JSON ({error}): {fix}") from error
    if not isinstance(content, kind):
        raise JumpLoRAError(f"{path}: the top level must be {shape}")
    return content


def _parse_task(path: Path, name: str, entry: object) -> TaskSpec:
    where = f"{path}: task {name!r}"
    if not isinstance(entry, dict):
        raise JumpLoRAError(f"{where} must be an object with {', '.join(_REQUIRED_TASK_KEYS)}")
    missing = [key for key in _REQUIRED_TASK_KEYS if key not in entry]
    if missing:
        raise JumpLoRAError(f"{where} lacks {', '.join(repr(key) for key in missing)}: add it to the task's entry")
    strings = {key: entry.get(key, default) for key, default in _STRING_FIELDS_AND_DEFAULTS.items()}
    bad = [key for key, value in strings.items() if not isinstance(value, str) or (key != "instruction" and not value)]
    if bad:
        raise JumpLoRAError(f"{where}: {', '.join(bad)} must be a string (non-empty except 'instruction')")
    if _leaves_the_folder(strings["path"]):
        raise JumpLoRAError(f"{where}: path {strings['path']!r} leaves the data directory: give a folder "
                            "relative to it, such as 'NLI/CB'")
    return TaskSpec(name=name, options=_parse_options(where, entry["options"]), **strings)


def _leaves_the_folder(folder: str) -> bool:
    """An absolute path (POSIX or Windows) or one with a `..` part."""
    posix = PurePosixPath(folder.replace("\\", "/"))
    return posix.is_absolute() or PureWindowsPath(folder).is_absolute() or ".." in posix.parts


def _parse_options(where: str, options: object) -> tuple[str, ...]:
    if not isinstance(options, list) or not options:
        raise JumpLoRAError(f"{where}: 'options' must be a non-empty list of answer strings")
    if not all(isinstance(option, str) and option.strip() for option in options):
        raise JumpLoRAError(f"{where}: every option must be a non-empty string, got {options!r}")
    if len(set(options)) != len(options):
        raise JumpLoRAError(f"{where}: 'options' lists an answer twice: {options!r}")
    return tuple(options)


def _parse_order(path: Path, key: str, tasks: object, specs: dict[str, TaskSpec]) -> tuple[int, tuple[str, ...]]:
    where = f"{path}: order {key!r}"
    if not key.isdigit():
        raise JumpLoRAError(f'{where}: order keys must be positive integers written as strings, e.g. "1"')
    if not isinstance(tasks, list) or not tasks or not all(isinstance(task, str) for task in tasks):
        raise JumpLoRAError(f"{where} must be a non-empty list of task names")
    unknown = [task for task in tasks if task not in specs]
    if unknown:
        names = ", ".join(unknown)
        raise JumpLoRAError(f"{where} names unknown task(s) {names}: add them under 'tasks' or fix the order")
    if len(set(tasks)) != len(tasks):
        raise JumpLoRAError(f"{where} lists a task twice: {tasks!r}")
    return int(key), tuple(tasks)
