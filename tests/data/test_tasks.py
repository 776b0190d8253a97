import json
from pathlib import Path

import pytest

from jumplora.data.tasks import BENCHMARK_ORDERS, DEFAULT_TASK_SPECS, PAPER_ORDERS, read_tasks_json
from jumplora.errors import JumpLoRAError

LONG_SEQUENCE = {
    "dbpedia",
    "amazon",
    "yahoo",
    "agnews",
    "yelp",
    "mnli",
    "cb",
    "rte",
    "wic",
    "copa",
    "qqp",
    "boolqa",
    "multirc",
    "imdb",
    "sst-2",
}


def test_paper_orders_as_in_the_data_readme():
    assert PAPER_ORDERS[1] == ("dbpedia", "amazon", "yahoo", "agnews")
    assert PAPER_ORDERS[3] == ("yahoo", "amazon", "agnews", "dbpedia")
    assert PAPER_ORDERS[4][:3] == ("mnli", "cb", "wic") and PAPER_ORDERS[4][-1] == "yahoo"
    assert PAPER_ORDERS[5][0] == "multirc" and PAPER_ORDERS[6][-1] == "wic"
    for order in (4, 5, 6):
        assert sorted(PAPER_ORDERS[order]) == sorted(LONG_SEQUENCE)
    assert BENCHMARK_ORDERS == {"sc": (1, 2, 3), "ls": (4, 5, 6)}


def test_default_specs_cover_the_fifteen_tasks():
    assert set(DEFAULT_TASK_SPECS) == LONG_SEQUENCE
    class_counts = {name: len(spec.options) for name, spec in DEFAULT_TASK_SPECS.items()}
    assert class_counts == {
        "dbpedia": 14,
        "yahoo": 10,
        "amazon": 5,
        "yelp": 5,
        "agnews": 4,
        "mnli": 3,
        "cb": 3,
        "rte": 2,
        "wic": 2,
        "copa": 2,
        "qqp": 2,
        "boolqa": 2,
        "multirc": 2,
        "imdb": 2,
        "sst-2": 2,
    }
    assert DEFAULT_TASK_SPECS["copa"].instruction == ""
    for name, spec in DEFAULT_TASK_SPECS.items():
        assert spec.name == name and spec.text_key == "sentence" and spec.label_key == "label"
        assert name == "copa" or (spec.instruction.endswith("\n") and "?" in spec.instruction)
    assert DEFAULT_TASK_SPECS["qqp"].options == ("False", "True")
    assert DEFAULT_TASK_SPECS["mnli"].options == ("neutral", "entailment", "contradiction")


def test_defaults_match_the_shipped_tasks_json(real_data_dir):
    orders, specs = read_tasks_json(real_data_dir / "tasks.json")
    assert orders == PAPER_ORDERS
    assert list(specs) == list(json.loads((real_data_dir / "tasks.json").read_text())["tasks"])
    for name, spec in specs.items():
        default = DEFAULT_TASK_SPECS[name]
        assert (spec.options, spec.path, spec.text_key, spec.label_key) == (
            default.options,
            default.path,
            default.text_key,
            default.label_key,
        )
        assert spec.instruction.strip() == "" if name == "copa" else spec.instruction.endswith("\n")


def _write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "tasks.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


GOOD_TASK = {"path": "X/x", "instruction": "Which?\n", "options": ["yes", "no"]}


def test_reads_orders_and_specs_with_default_keys(tmp_path):
    path = _write(
        tmp_path,
        {
            "orders": {"2": ["x", "y"], "1": ["y"]},
            "tasks": {"x": GOOD_TASK, "y": {**GOOD_TASK, "path": "Y/y", "text_key": "t"}},
        },
    )
    orders, specs = read_tasks_json(path)
    assert orders == {1: ("y",), 2: ("x", "y")}
    assert specs["x"].options == ("yes", "no") and specs["x"].text_key == "sentence"
    assert specs["y"].text_key == "t" and specs["y"].label_key == "label" and specs["y"].path == "Y/y"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ([1, 2], "top level must be a JSON object"),
        ({"tasks": {"x": GOOD_TASK}}, "'orders'"),
        ({"orders": {}}, "'tasks'"),
        ({"orders": {}, "tasks": {"x": {"path": "X/x", "instruction": ""}}}, "lacks 'options'"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "options": []}}}, "non-empty list"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "options": ["a", "a"]}}}, "lists an answer twice"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "options": ["a", " "]}}}, "non-empty string"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "path": ""}}}, "path"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "path": "../../../../etc"}}},
         "task 'x': path '../../../../etc' leaves the data directory"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "path": "/etc"}}}, "path '/etc' leaves the data directory"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "path": "X/..\\..\\up"}}}, "leaves the data directory"),
        ({"orders": {}, "tasks": {"x": {**GOOD_TASK, "path": "C:\\data"}}}, "leaves the data directory"),
        ({"orders": {"1": ["x", "zzz"]}, "tasks": {"x": GOOD_TASK}}, "unknown task(s) zzz"),
        ({"orders": {"one": ["x"]}, "tasks": {"x": GOOD_TASK}}, "positive integers"),
        ({"orders": {"1": ["x", "x"]}, "tasks": {"x": GOOD_TASK}}, "lists a task twice"),
    ],
)
def test_bad_files_raise_one_clear_line_naming_the_file(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(JumpLoRAError, match="tasks.json") as error:
        read_tasks_json(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_missing_file(tmp_path):
    with pytest.raises(JumpLoRAError, match="missing file .*tasks.json"):
        read_tasks_json(tmp_path / "tasks.json")
