"""`jumplora eval` scores a model as its run scored it: the order, the tasks it trained, the seed, caps and data its
results.json records, beside the run's last test row; each option given in place of the run's value is said in one
line; a model that records no run needs --order; bad input is one line. The scoring itself is stubbed here
(`cli_eval.score_tasks`: what it was asked is recorded); a real model's scores are checked against its run in
tests/tracking/test_models.py."""

import json
import types

import pytest

from jumplora import cli_eval, options, uncertainty
from jumplora.cli import main
from jumplora.flags import pack
from jumplora.results import RunResults

# a run of order 1 (dbpedia, amazon, yahoo, agnews) cut after 2 tasks, with its own seed and caps
CONFIG = {"order": 1, "method": "inclora", "data_dir": None, "seed": 7, "max_train_per_task": 65,
          "max_eval_per_task": 16, "max_tasks": 2, "strict": False, "max_source_tokens": 512, "max_target_tokens": 8,
          "eval_batch_size": 64, "eval_mode": "fast", "precision": "fp32", "authors_compat": False, "lr": 0.001}
LAST_ROW = [0.25, 0.75]
# what the stubbed scoring finds: each task's test flags (4 examples), their accuracy 50, 100, 25, 75 %
FLAGS = {"dbpedia": [1, 1, 0, 0], "amazon": [1, 1, 1, 1], "yahoo": [1, 0, 0, 0], "agnews": [1, 1, 1, 0]}
HEADER = "as its run scored it: order 1, the 2 task(s) it trained, seed 7, data synthetic, --max-eval-per-task 16"
# k of 4 right: the 95 % Wilson interval (p + z²/2n ± z √(p(1 − p)/n + z²/4n²)) / (1 + z²/n), z = 1.96, in percent:
# 1 of 4 [4.6, 69.9], 2 [15.0, 85.0], 3 [30.1, 95.4], 4 [51.0, 100.0]. The mean of dbpedia and amazon: amazon right in
# every resample, dbpedia k ~ Binomial(4, 1/2) right, (25 k + 100) / 2 with P(k = 0) = P(k = 4) = 1/16 > 2.5 %:
# [50.0, 100.0]. The run (written before flags were kept): its row without intervals, and one note.
TABLE = ["task         eval 95 % interval     run 95 % interval",
         "dbpedia     50.00 [15.0, 85.0]    25.00",
         "amazon     100.00 [51.0, 100.0]   75.00",
         "mean        75.00 [50.0, 100.0]   50.00",
         "[low, high]: 95 % intervals; a task's Wilson, the mean's a bootstrap over the test examples (stratified by "
         "task, 2000 resamples, seeded); the run: no intervals (written before flags were kept)"]


def write_run(folder, model=True, flagged=False, **config):
    """A run of order 1 cut after 2 tasks; `flagged`: one that kept its test flags, its last row [50, 100] % as the
    stubbed model scores it (`FLAGS`), else one written before flags were kept (`LAST_ROW`)."""
    folder.mkdir()
    results = {"schema": 1, "order": 1, "tasks": ["dbpedia", "amazon"], "method": "inclora",
               "config": {**CONFIG, **config}, "seed": 7, "accuracy_matrix": [[0.5, None], LAST_ROW], "oa": 50.0,
               "bwt": -25.0}
    if flagged:
        results.update(accuracy_matrix=[[0.5, None], [0.5, 1.0]], oa=75.0, bwt=0.0,
                       test_flags=[[pack(FLAGS["dbpedia"])], [pack(FLAGS["dbpedia"]), pack(FLAGS["amazon"])]])
        results["intervals"] = uncertainty.run_intervals(RunResults.from_json(results)).to_json()
    (folder / "results.json").write_text(json.dumps(results))
    if model:
        (folder / "merged_model").mkdir()
        (folder / "merged_model" / "config.json").write_text("{}")
    return folder


@pytest.fixture
def asked(monkeypatch):
    """What `score_tasks` was asked (config, tasks, model folder), the stub answering `FLAGS` (as a
    `continual.Evaluation`: each task's accuracy and its packed flags)."""
    calls = []

    def score(config, tasks, model_dir, progress):
        calls.append((config, tasks, model_dir))
        return types.SimpleNamespace(accuracies=[sum(FLAGS[task]) / 4 for task in tasks],
                                     flags=[pack(FLAGS[task]) for task in tasks])

    monkeypatch.setattr(cli_eval, "score_tasks", score)
    return calls


def evaluated(capsys, *argv) -> list[str]:
    capsys.readouterr()
    assert main(["eval", *argv, "--quiet"]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("where", [".", "merged_model"], ids=["run directory", "its merged_model"])
def test_a_run_is_scored_on_the_tasks_it_trained_with_its_seed_caps_and_data(tmp_path, capsys, asked, where):
    run = write_run(tmp_path / "run")
    assert evaluated(capsys, str(run / where)) == [HEADER, *TABLE]
    [(config, tasks, model_dir)] = asked
    assert tasks == ("dbpedia", "amazon") and model_dir == run / "merged_model"
    assert (config.order, config.seed, config.max_train_per_task, config.max_eval_per_task, config.data_dir,
            config.strict) == (1, 7, 65, 16, None, False)


# each option of `jumplora eval` given in place of the run's value: the lines it adds, the tasks scored, and the
# configuration's value it changes (written out by hand)
OVERRIDES = {
    "order": (["--order", "3"], ["--order 3 in place of the run's 1",
                                 "the model never trained on yahoo: the run has no score for it (–)"],
              ("yahoo", "amazon"), ("order", 3)),
    "data_dir": (["--data-dir", "synthetic"], ["--data-dir synthetic in place of the run's /nowhere/CL_Benchmark"],
                 ("dbpedia", "amazon"), ("data_dir", None)),
    "seed": (["--seed", "8"], ["--seed 8 in place of the run's 7"], ("dbpedia", "amazon"), ("seed", 8)),
    "max_train_per_task": (["--max-train-per-task", "96"], ["--max-train-per-task 96 in place of the run's 65"],
                           ("dbpedia", "amazon"), ("max_train_per_task", 96)),
    "max_eval_per_task": (["--max-eval-per-task", "8"], ["--max-eval-per-task 8 in place of the run's 16"],
                          ("dbpedia", "amazon"), ("max_eval_per_task", 8)),
    "max_tasks": (["--max-tasks", "3"], ["--max-tasks 3 in place of the run's 2 trained tasks",
                                         "the model never trained on yahoo: the run has no score for it (–)"],
                  ("dbpedia", "amazon", "yahoo"), ("order", 1)),
    "strict": (["--strict"], ["--strict, which the run was not given"], ("dbpedia", "amazon"), ("strict", True)),
}


def test_every_option_of_eval_is_enumerated():
    assert set(OVERRIDES) == set(options.command_fields("eval"))


@pytest.mark.parametrize("name", OVERRIDES)
def test_an_option_given_scores_otherwise_and_says_so_in_one_line(tmp_path, capsys, asked, name):
    argv, said, tasks, (field, value) = OVERRIDES[name]
    data_dir = "/nowhere/CL_Benchmark" if name == "data_dir" else None  # a run of data that is not here
    run = write_run(tmp_path / "run", data_dir=data_dir)
    lines = evaluated(capsys, str(run), *argv)
    header = HEADER.replace("data synthetic", f"data {data_dir}") if data_dir else HEADER
    assert lines[: 1 + len(said)] == [header, *said]
    [(config, scored, _)] = asked
    assert scored == tasks and getattr(config, field) == value
    rows = {line.split()[0]: line for line in lines[1 + len(said):]}
    assert rows["amazon"] == TABLE[2]
    if "yahoo" in tasks:  # scored, but the run has no score for it: nor for the mean
        assert rows["yahoo"] == "yahoo       25.00 [4.6, 69.9]         –" and rows["mean"].endswith(" –")


def test_a_run_that_kept_its_flags_prints_its_intervals_beside_the_model_s(tmp_path, capsys, asked):
    """The run's own model (scored as the run scored it: the same flags) prints the run's row and intervals; the run's
    mean's interval is its OA's in results.json."""
    run = write_run(tmp_path / "run", flagged=True)
    assert evaluated(capsys, str(run)) == [
        HEADER, TABLE[0],
        "dbpedia     50.00 [15.0, 85.0]    50.00 [15.0, 85.0]",
        "amazon     100.00 [51.0, 100.0]  100.00 [51.0, 100.0]",
        "mean        75.00 [50.0, 100.0]   75.00 [50.0, 100.0]",
        TABLE[-1].split("; the run")[0]]
    recorded = json.loads((run / "results.json").read_text())["intervals"]["oa"]
    assert recorded == [50.0, 100.0]


def test_the_run_s_own_values_given_again_are_no_override(tmp_path, capsys, asked):
    run = write_run(tmp_path / "run")
    assert evaluated(capsys, str(run), "--order", "1", "--seed", "7", "--max-eval-per-task", "16",
                     "--max-tasks", "2") == [HEADER, *TABLE]


def test_a_saved_model_records_no_run_and_is_scored_as_the_options_say(tmp_path, capsys, asked):
    model = tmp_path / "saved"
    model.mkdir()
    (model / "config.json").write_text("{}")
    lines = evaluated(capsys, str(model), "--order", "1", "--max-tasks", "1", "--json")
    # the mean of one task: 25 k, k ~ Binomial(4, 1/2) right, P(k = 0) = P(k = 4) = 1/16 > 2.5 %
    assert lines == ["task         eval 95 % interval", "dbpedia     50.00 [15.0, 85.0]",
                     "mean        50.00 [0.0, 100.0]", TABLE[-1].split("; the run")[0], json.dumps({"dbpedia": 0.5})]
    [(config, tasks, model_dir)] = asked
    assert tasks == ("dbpedia",) and model_dir == model and (config.seed, config.max_eval_per_task) == (42, None)


def refusals(tmp_path) -> dict[str, tuple[list[str], str]]:
    """Each bad input: the arguments, and the one line it gets (written out by hand)."""
    run, bare, empty, saved = (write_run(tmp_path / "run"), write_run(tmp_path / "bare", model=False),
                               tmp_path / "empty", tmp_path / "saved")
    moved = write_run(tmp_path / "moved", data_dir=str(tmp_path / "gone"))
    empty.mkdir()
    saved.mkdir()
    (saved / "config.json").write_text("{}")
    return {
        "a run without its merged model": ([str(bare)], f"{bare} is a run directory without a merged model: run it "
                                           "with --save-merged-model, or pass the folder its --save-model wrote"),
        "neither a run nor a model": ([str(empty)], f"{empty} is neither a run directory nor a saved model (no "
                                      "results.json, no config.json): pass a run directory, a --save-model folder "
                                      "or a model's URI"),
        "a saved model without --order": ([str(saved)], f"{saved} records no run (a --save-model folder, or a model "
                                          "logged without its run's results.json): pass --order N, and the run's "
                                          "--seed and caps to score the examples it scored"),
        "more tasks than the order": ([str(run), "--max-tasks", "5"], "--max-tasks 5, but order 1 has 4 tasks"),
        "more tasks than the order, no run": ([str(saved), "--order", "1", "--max-tasks", "5"],
                                              "--max-tasks 5, but order 1 has 4 tasks"),
        "the run's data not here": ([str(moved)], f"the run read its data from {tmp_path / 'gone'}, which is not a "
                                    "folder here: pass --data-dir of that data"),
    }


CASES = ["a run without its merged model", "neither a run nor a model", "a saved model without --order",
         "more tasks than the order", "more tasks than the order, no run", "the run's data not here"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_scores_nothing(tmp_path, capsys, asked, case):
    argv, line = refusals(tmp_path)[case]
    capsys.readouterr()
    assert main(["eval", *argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"jumplora: error: {line}"] and asked == []

