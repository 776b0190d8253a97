"""The typed results: `RunResults` (results.json) refuses another schema and damaged files with one line and reads a
file written before `schema` existed; `StageRecord` (a λ grid's manifest.json) reads and writes a manifest as it is,
and a grid cut after a stage resumes from it with its finished stages unchanged."""

import json

import pytest

from jumplora.cli import main
from jumplora.errors import JumpLoRAError
from jumplora.results import SCHEMA, RunResults, StageRecord, TrialRecord, read_results

# written as a results.json from before the `schema` field: a two-task inclora run, OA 60, BWT −30
LEGACY = {"order": 1, "tasks": ["t1", "t2"], "method": "inclora", "config": {"threshold": "global"}, "seed": 42,
          "accuracy_matrix": [[0.8, None], [0.5, 0.7]], "oa": 60.0, "bwt": -30.0, "fwt": None}


def test_a_results_json_without_schema_reads_as_schema_1(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(LEGACY))
    results = read_results(path)
    assert SCHEMA == 1 and results.schema == 1
    assert (results.method, results.order, results.seed, results.oa, results.bwt) == ("inclora", 1, 42, 60.0, -30.0)
    assert results.accuracy_matrix == [[0.8, None], [0.5, 0.7]] and results.cost is None  # not recorded then
    written = results.to_json()
    assert list(written)[:4] == ["schema", "order", "tasks", "method"] and written["schema"] == 1
    assert RunResults.from_json(written) == results


@pytest.mark.parametrize(("schema", "shown"), [(7, "7"), ("1", '"1"'), (0, "0")])
def test_another_schema_is_refused_with_one_line(schema, shown, tmp_path, capsys):
    path = tmp_path / "run" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"schema": schema, **LEGACY}))
    message = (f"{path} has schema {shown}; this jumplora reads schema 1: read it with the jumplora version that "
               "wrote it (upgrade jumplora)")
    with pytest.raises(JumpLoRAError) as error:
        read_results(path)
    assert str(error.value) == message
    assert main(["report", str(path.parent), "--out", str(tmp_path / "report")]) == 2  # a reader: one line, exit 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"jumplora: error: {message}")
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"method": None}, "holds a value of the wrong type (method must be a string, got null)"),
    ({"seed": 42.5}, "holds a value of the wrong type (seed must be an integer, got 42.5)"),
    ({"oa": "60"}, 'holds a value of the wrong type (oa must be a number, got "60")'),
    ({"oa": True}, "holds a value of the wrong type (oa must be a number, got true)"),
    ({"tasks": "t1,t2"}, 'holds a value of the wrong type (tasks must be a list, got "t1,t2")'),
])
def test_a_value_of_the_wrong_type_is_named(change, message):
    with pytest.raises(JumpLoRAError, match=f"^x.json {message}$".replace("(", r"\(").replace(")", r"\)")):
        RunResults.from_json({**LEGACY, **change}, "x.json")


def test_missing_keys_and_not_an_object_are_named():
    with pytest.raises(JumpLoRAError, match="^x.json lacks 'seed', 'bwt'$"):
        RunResults.from_json({key: value for key, value in LEGACY.items() if key not in ("seed", "bwt")}, "x.json")
    with pytest.raises(JumpLoRAError, match=r"^x.json does not hold a JSON object$"):
        RunResults.from_json([1, 2], "x.json")


# a manifest.json as grid_lambda.py writes it, by hand: stage 1 (λ = 0, a0 of task 2), stage 2 of a grid, stage 3 of
# a halving search (λ 1 cut at a rung), and a stage recorded before steps, work, cost and the search were kept
TRIAL = {"lam": 0.0, "dev_mean": 0.5, "dev_past": None, "dev_current": 0.5, "test_mean": 0.45,
         "checkpoint": "/g/task01/t0/checkpoint_000000", "steps": 3, "selected": True}


def halving_trial(lam: float, dev_mean: float | None, rung_dev: list[float], selected: bool, **cut) -> dict:
    """A trial of a halving stage, its keys in the order the grid writes them; `cut`: where a rung stopped it."""
    return {"lam": lam, "dev_mean": dev_mean, "dev_past": None, "dev_current": dev_mean, "test_mean": None,
            "checkpoint": f"/g/task03/lam{lam:g}", "steps": 1 if cut else 3, "rung_dev": rung_dev, **cut,
            "selected": selected}


COST = {"trainings": 2, "optimizer_steps": 6, "seconds": 12.5, "device_hours": 0.01, "device_unit": "CPU"}
STAGES = [
    {"task": 1, "task_name": "dbpedia", "selected_lam": 0.0, "checkpoint": "/g/task01/t0/checkpoint_000000",
     "trials": [TRIAL], "baselines": [{"task": 2, "a0": 0.6, "seconds": 4.0, "steps": 3}], "seconds": 20.0,
     "search": "grid", "work": {"steps": 6, "dev_examples": 16, "test_examples": 32}, "cost": COST},
    {"task": 2, "task_name": "amazon", "selected_lam": 1000.0, "checkpoint": "/g/task02/chosen",
     "trials": [{**TRIAL, "lam": lam, "dev_mean": dev, "dev_past": 0.4, "test_mean": test, "selected": lam == 1e3}
                for lam, dev, test in [(1.0, 0.4, None), (1000.0, 0.55, 0.5)]],
     "baselines": [], "seconds": 30.0, "search": "grid", "work": {"steps": 6, "dev_examples": 32, "test_examples": 32},
     "cost": COST},
    {"task": 3, "task_name": "yahoo", "selected_lam": 10.0, "checkpoint": "/g/task03/chosen",
     "trials": [halving_trial(1.0, None, [0.3], False, cut_at_step=1, rung_dev_mean=0.3, rung_dev_past=0.35,
                              rung_dev_current=0.2),
                halving_trial(10.0, 0.5, [0.45], True)],
     "baselines": [], "seconds": 25.0, "search": "halving", "work": {"steps": 4, "dev_examples": 40,
                                                                      "test_examples": 48},
     "cost": COST, "rung_steps": [1]},
    {"task": 4, "task_name": "agnews", "selected_lam": 1.0, "checkpoint": "/g/task04/chosen",
     "trials": [{"lam": 1.0, "dev_mean": 0.5, "dev_past": 0.5, "dev_current": 0.5, "test_mean": 0.5,
                 "checkpoint": "/g/task04/t1", "selected": True}], "baselines": [], "seconds": 10.0},
]


def test_stage_records_read_and_write_a_manifest_as_it_is():
    records = [StageRecord.from_json(stage) for stage in STAGES]
    assert [json.dumps(record.to_json()) for record in records] == [json.dumps(stage) for stage in STAGES]
    assert [record.chosen.lam for record in records] == [0.0, 1000.0, 10.0, 1.0]
    cut = records[2].trials[0]
    assert (cut.cut_at_step, cut.rung_dev_mean, cut.rung_dev, cut.dev_mean) == (1, 0.3, [0.3], None)
    assert records[3].work is None and records[3].search is None and records[3].trials[0].steps is None


def test_select_takes_the_best_dev_mean_and_on_a_tie_the_smaller_lambda():
    from ray_jobs import search

    trials = [TrialRecord(lam=lam, dev_mean=dev) for lam, dev in [(1.0, 0.5), (10.0, 0.7), (100.0, 0.7), (1e3, None)]]
    assert search.select(trials) is trials[1]
    assert search.select([trials[0], TrialRecord(lam=0.5, dev_mean=0.5 - 1e-13)]).lam == 0.5  # within TIE_TOLERANCE


def test_a_grid_cut_after_its_stages_resumes_from_its_manifest(tmp_path):
    """`grid.Manifest` reads the stages of a manifest.json written before, and adding a stage rewrites the finished
    ones exactly as they were."""
    from jumplora.storage import MANIFEST, Storage
    from ray_jobs import grid

    identity = {"run": {"order": 1, "method": "jumplora+ella"}, "lambdas_tried": [[0.0], [1.0, 1e3]]}
    (tmp_path / "grid").mkdir()
    (tmp_path / "grid" / MANIFEST).write_text(json.dumps({"job": identity, "stages": STAGES[:3]}, indent=1))
    manifest = grid.Manifest(Storage(str(tmp_path / "grid")), identity)
    assert [stage.task for stage in manifest.stages] == [1, 2, 3]
    assert grid.stage_job(grid.jobs.Job(grid.RunConfig(lambdas=[0.0] * 4), "c"), manifest.stages).run.lambdas == \
        [0.0, 1000.0, 10.0, 0.0]
    manifest.add(StageRecord.from_json(STAGES[3]))
    assert (tmp_path / "grid" / MANIFEST).read_text() == json.dumps({"job": identity, "stages": STAGES},
                                                                          indent=1)
    with pytest.raises(JumpLoRAError, match="holds a grid of another configuration"):
        grid.Manifest(Storage(str(tmp_path / "grid")), {**identity, "lambdas_tried": [[0.0], [1.0]]})
