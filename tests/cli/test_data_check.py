"""`jumplora data check`: beside the validation table, what stops a run (a task named twice in tasks.json, a split
with no usable example, a prompt that leaves no room for the text; exit 1) and what trains badly (a one-class train
split; exit 1 with --strict only)."""

import json

import pytest

from jumplora import tiny
from jumplora.cli import main


def write_folder(root, tasks: dict[str, dict[str, list[str]]], twice: str | None = None):
    """Tasks with the options x, y and the given labels per split (texts numbered); `twice`: a task whose entry
    tasks.json holds twice (the first one an empty copy, which JSON's last-wins reading drops)."""
    root.mkdir()
    entries = [f'"{name}": {json.dumps({"path": name, "instruction": "Which?", "options": ["x", "y"]})}'
               for name in tasks]
    if twice is not None:
        entries.insert(0, f'"{twice}": {{}}')
    orders = json.dumps({"1": list(tasks)})
    (root / "tasks.json").write_text(f'{{"orders": {orders}, "tasks": {{{", ".join(entries)}}}}}')
    for name, splits in tasks.items():
        (root / name).mkdir()
        for split, labels in splits.items():
            records = [{"sentence": f"{name} {split} text {i}", "label": label} for i, label in enumerate(labels)]
            (root / name / f"{split}.json").write_text(json.dumps(records))
    return root


GOOD = {"train": ["x", "y", "x"], "dev": ["x", "y"], "test": ["y", "x"]}
ONE_CLASS = {"train": ["x", "x", "x"], "dev": ["x", "y"], "test": ["x", "y"]}
NOTHING_USABLE = {"train": ["z", "z"], "dev": ["x"], "test": ["y"]}


def check(capsys, *args) -> tuple[int, list[str]]:
    code = main(["data", "check", *map(str, args)])
    return code, capsys.readouterr().out.splitlines()


def test_what_stops_a_run_is_listed_and_exits_1(tmp_path, capsys):
    root = write_folder(tmp_path / "data", {"a": GOOD, "b": ONE_CLASS, "c": NOTHING_USABLE}, twice="a")
    code, lines = check(capsys, root)
    tail = lines[lines.index("problems that stop a run:"):]
    assert code == 1 and tail == [
        "problems that stop a run:",
        f"  {root / 'tasks.json'}: the key 'a' appears 2 times in one object",
        "  task 'c': its train split has no usable example (2 dropped, label not an option ('z': 2))",
        "findings:",
        "  task 'b': its train split holds one class only ('x'): the task trains to one answer",
        "3 tasks, 9 splits, 2 examples dropped or relabelled, 2 problem(s) that stop a run, 1 other finding(s)"]


@pytest.mark.parametrize(("strict", "expected"), [(False, 0), (True, 1)])
def test_a_one_class_task_fails_only_a_strict_check(strict, expected, tmp_path, capsys):
    root = write_folder(tmp_path / "data", {"a": GOOD, "b": ONE_CLASS})
    code, lines = check(capsys, root, *(["--strict"] if strict else []))
    assert code == expected and "problems that stop a run:" not in lines
    assert lines[-1] == "2 tasks, 6 splits, 0 examples dropped or relabelled, 0 problem(s) that stop a run, " \
                        "1 other finding(s)"


def test_a_prompt_that_leaves_no_room_for_the_text_stops_a_run(tmp_path, tiny_cache, capsys):
    root = write_folder(tmp_path / "data", {"a": GOOD})
    tokenizer = tiny.named_model_dir(tiny.TINY, None, tiny_cache, progress=False)
    code, lines = check(capsys, root, "--tokenizer", tokenizer, "--max-source-tokens", "8")
    assert code == 1
    found = [line for line in lines if line.startswith("  task 'a': its prompt takes ")]
    assert len(found) == 1 and found[0].endswith("tokens, leaving no room for the text in --max-source-tokens 8")
    assert int(found[0].split("takes ")[1].split()[0]) >= 8
