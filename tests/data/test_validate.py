import pytest

from jumplora.data.types import Example, TaskSpec
from jumplora.data.validate import (
    SplitReport,
    count_too_long,
    format_report,
    raise_if_strict_problems,
    report_warnings,
    validate_task,
)
from jumplora.errors import JumpLoRAError

SPEC = TaskSpec(name="senti", instruction="Is it good?\n", options=("positive", "negative"))


def ex(text: str, label: str) -> Example:
    return Example(text=text, label=label)


def messy_splits() -> dict[str, list[Example]]:
    """train: 2 clean (one label padded with spaces), 3 bad labels (x, x, '-'), 1 label "Positive" to relabel,
    1 empty text, 1 within-split duplicate, 1 copy of a dev text, 1 copy of a test text;
    dev: 1 clean, 1 copy of a test text, 1 duplicate; test: 2 clean, 1 whitespace-only text."""
    return {
        "train": [
            ex("good film", "positive"),
            ex("bad film", " negative "),
            ex("odd", "x"),
            ex("odder", "x"),
            ex("oddest", "-"),
            ex("fine film", "Positive"),
            ex("", "positive"),
            ex("good film", "negative"),
            ex("dev text", "positive"),
            ex("test text", "negative"),
        ],
        "dev": [ex("dev text", "positive"), ex("test text", "negative"), ex("dev text", "positive")],
        "test": [ex("test text", "negative"), ex("other test", "positive"), ex(" \n\t", "negative")],
    }


def test_counts_every_kind_of_problem():
    kept, reports = validate_task(SPEC, messy_splits())
    by_split = {report.split: report for report in reports}
    assert [report.split for report in reports] == ["train", "dev", "test"]
    assert by_split["train"] == SplitReport(
        "senti",
        "train",
        read=10,
        kept=3,
        unknown_labels={"x": 2, "-": 1},
        relabelled=1,
        empty_texts=1,
        duplicates=1,
        leaked=2,
    )
    assert by_split["dev"] == SplitReport("senti", "dev", read=3, kept=1, duplicates=1, leaked=1)
    assert by_split["test"] == SplitReport("senti", "test", read=3, kept=2, empty_texts=1)
    assert by_split["train"].problems == 8 and by_split["test"].problems == 1


def test_keeps_first_copies_test_untouched_and_labels_spelled_as_options():
    kept, _ = validate_task(SPEC, messy_splits())
    assert kept["train"] == [ex("good film", "positive"), ex("bad film", "negative"), ex("fine film", "positive")]
    assert kept["dev"] == [ex("dev text", "positive")]
    assert kept["test"] == [ex("test text", "negative"), ex("other test", "positive")]


def test_first_usable_copy_is_kept_when_the_first_copy_is_unusable():
    kept, reports = validate_task(SPEC, {"train": [ex("same", "x"), ex("same", "negative")]})
    assert kept["train"] == [ex("same", "negative")]
    assert reports[0].duplicates == 0 and reports[0].unknown_labels == {"x": 1}


def test_case_folding_only_when_it_names_one_option():
    spec = TaskSpec(name="t", instruction="", options=("Yes", "yes", "No"))
    kept, reports = validate_task(spec, {"test": [ex("a", "YES"), ex("b", "no"), ex("c", "  very   NO ")]})
    assert kept["test"] == [ex("b", "No")]
    assert reports[0].unknown_labels == {"YES": 1, "  very   NO ": 1} and reports[0].relabelled == 1


def test_clean_data_has_no_problems_and_no_warnings():
    splits = {"train": [ex("a", "positive")], "dev": [ex("b", "negative")], "test": [ex("c", "positive")]}
    kept, reports = validate_task(SPEC, splits)
    assert kept == splits
    assert all(report.problems == 0 for report in reports)
    assert report_warnings(reports) == []
    raise_if_strict_problems(reports, "folder")


def test_strict_raises_one_line_summarising_the_problems():
    _, reports = validate_task(SPEC, messy_splits())
    with pytest.raises(JumpLoRAError) as error:
        raise_if_strict_problems(reports, "/data/CL")
    message = str(error.value)
    assert "\n" not in message and "/data/CL" in message
    assert "senti/train: 3 dropped, label not an option ('-': 1, 'x': 2)" in message
    assert "senti/dev: 1 dropped, duplicate text within the split; 1 dropped, text also in test" in message
    assert "senti/test: 1 dropped, empty text" in message


def test_warnings_describe_each_split_with_problems():
    _, reports = validate_task(SPEC, messy_splits())
    warnings = report_warnings(reports)
    assert len(warnings) == 3
    assert "1 relabelled" in warnings[0] and "2 dropped, text also in dev/test" in warnings[0]


def test_count_too_long_uses_the_given_counter():
    examples = [ex("one two", "positive"), ex("one two three four", "negative"), ex("x", "positive")]
    assert count_too_long(SPEC, examples, lambda spec, text: len(spec.options) + len(text.split()), 4) == 1


def test_format_report_is_a_table_with_one_row_per_split():
    _, reports = validate_task(SPEC, messy_splits())
    table = format_report(reports).splitlines()
    assert table[0].split() == [
        "task",
        "split",
        "read",
        "kept",
        "bad",
        "label",
        "relabelled",
        "empty",
        "dup",
        "leaked",
        "too",
        "long",
    ]
    assert table[2].split() == ["senti", "train", "10", "3", "3", "1", "1", "1", "2", "-"]
    assert table[4].split() == ["senti", "test", "3", "2", "0", "0", "1", "0", "0", "-"]
    assert table[-1] == "senti/train: {'x': 2, '-': 1}"
