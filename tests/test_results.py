"""The typed results: `RunResults` (results.json) refuses another schema and damaged files with one line and reads a
file written before `schema` existed; `StageRecord` (a λ grid's manifest.json) reads and writes a manifest as it is,
and a grid cut after a stage resumes from it with its finished stages unchanged."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from jumplora.cli import main
from jumplora.errors import JumpLoRAError
from jumplora.results import KINDS, SCHEMA, RunResults, StageRecord, TrialRecord, read_results
from tests.conftest import console_script

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
    Storage(str(tmp_path / "grid")).write_json(MANIFEST, {"job": identity, "stages": STAGES[:3]})  # as a driver did
    manifest = grid.Manifest(Storage(str(tmp_path / "grid")), identity)
    assert [stage.task for stage in manifest.stages] == [1, 2, 3]
    assert grid.stage_job(grid.jobs.Job(grid.RunConfig(lambdas=[0.0] * 4), "c"), manifest.stages).run.lambdas == \
        [0.0, 1000.0, 10.0, 0.0]
    manifest.add(StageRecord.from_json(STAGES[3]))
    assert (tmp_path / "grid" / MANIFEST).read_text() == json.dumps({"job": identity, "stages": STAGES},
                                                                          indent=1)
    with pytest.raises(JumpLoRAError, match="holds a grid of another configuration"):
        grid.Manifest(Storage(str(tmp_path / "grid")), {**identity, "lambdas_tried": [[0.0], [1.0]]})


# ---------------------------------------------------------------- the one schema, every field mutated

# a real run's results.json: the published run of a two-task λ grid of jumplora+ella (the tiny preset, 16 test
# examples a task, with a0, flags and intervals), as tests/ray_jobs/test_grid.py's grid wrote it
RUN = json.loads((Path(__file__).parent / "run_results.json").read_text())
MUTATIONS = ("wrong type", "missing", "NaN", "huge", "short row")
# what may be left out: what a file written before it was recorded lacks (all but the keys every results.json holds,
# and `tasks`, beside which the matrices and the other lists are listed)
MAY_BE_MISSING = {"config", "data_fingerprint", "accuracy_matrix", "dev_accuracy_matrix", "single_task_accuracy",
                  "single_task_accuracy_shared", "unlabelled_test", "majority_baseline", "la", "fwt", "fwt_last_row",
                  "intervals", "sparsity", "jaccard", "thresholds", "lambdas", "loss_curves", "runtime", "cost",
                  "test_flags", "dev_flags", "single_task_flags", "single_task_flags_shared", "test_fingerprints"}
# the fields with no list inside (or null in this run): no row to shorten
NO_ROW = {"order", "method", "seed", "data_fingerprint", "oa", "la", "bwt", "fwt", "fwt_last_row", "runtime",
          "single_task_accuracy_shared", "single_task_flags_shared", "unlabelled_test"}
# a shorter row that is still a file a run writes: the config's λ is the option as given (four for order 1's four
# tasks; this run stopped after two)
ALLOWED = {("missing", name) for name in MAY_BE_MISSING} | {("short row", "config")}
# where a mutation of one field is found wrong in another (that names the mutated one too): one task fewer in `tasks`
# than the matrix has rows
FOUND_IN = {("short row", "tasks"): "accuracy_matrix"}
NAMED = re.compile(r"(?:holds a value of the wrong type \(|lacks '|holds a number that is not finite \(|holds a "
                   r"wrong value \()(\w+)")


def path_to(value, wanted) -> list | None:
    """The keys to the first value (depth first, `value` itself first) that is `wanted`, or None."""
    if wanted(value):
        return []
    entries = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, entry in entries:
        found = path_to(entry, wanted)
        if found is not None:
            return [key, *found]
    return None


def replaced(value, path: list, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


def at(value, path: list):
    for key in path:
        value = value[key]
    return value


def mutated(name: str, mutation: str) -> dict | None:
    """RUN with `mutation` done to its field `name`; None when it has no row to shorten. NaN and huge go to the field's
    first number (the field itself where it holds none: then it is of the wrong type)."""
    value = RUN[name]
    if mutation == "missing":
        return {key: v for key, v in RUN.items() if key != name}
    if mutation == "wrong type":
        return {**RUN, name: 7 if isinstance(value, str) else "x"}
    if mutation == "short row":
        path = path_to(value, lambda v: isinstance(v, list))
        return None if path is None else {**RUN, name: replaced(value, path, at(value, path)[:-1])}
    path = path_to(value, lambda v: isinstance(v, int | float) and not isinstance(v, bool)) or []
    return {**RUN, name: replaced(value, path, float("nan") if mutation == "NaN" else 1e308)}


def test_the_real_run_reads_and_every_field_and_mutation_is_enumerated():
    results = RunResults.from_json(RUN)
    assert (results.method, results.tasks, results.joint, results.bwt) == ("jumplora+ella", ["dbpedia", "amazon"],
                                                                          False, -6.25)
    assert set(RUN) == {"schema", *KINDS}
    assert {name for name in KINDS if mutated(name, "short row") is None} == NO_ROW


@pytest.mark.parametrize("mutation", MUTATIONS)
@pytest.mark.parametrize("name", list(KINDS))
def test_every_field_mutated_is_refused_naming_it_unless_older_files_hold_it_so(name, mutation):
    data = mutated(name, mutation)
    if data is None:
        assert name in NO_ROW
        return
    if (mutation, name) in ALLOWED:
        results = RunResults.from_json(data, "r.json")
        assert mutation != "missing" or getattr(results, name) is None
        return
    with pytest.raises(JumpLoRAError) as error:
        RunResults.from_json(data, "r.json")
    line = str(error.value)
    assert "\n" not in line and line.startswith("r.json ")
    assert NAMED.search(line)[1] == FOUND_IN.get((mutation, name), name), line
    assert re.search(rf"\b{name}\b", line), line


def cell(row: int, column: int, value) -> dict:
    matrix = [list(r) for r in RUN["accuracy_matrix"]]
    matrix[row][column] = value
    return {**RUN, "accuracy_matrix": matrix}


# the damage the bad-input round found (issue 56), each written out with its line; what is not a file a run writes
# ends "(…): no run writes that, so the file was changed or damaged; run it again"
WRONG = {
    "bwt null: a continual run read as MTL": (
        {**RUN, "bwt": None},
        "bwt is null, but jumplora+ella is a continual method, whose runs record their BWT (null is a joint method's, "
        "as MTL's)"),
    "a string in a matrix cell": (cell(1, 0, "0.4375"), 'accuracy_matrix[1][0] must be an accuracy in [0, 1], got '
                                                         '"0.4375"'),
    "a short row": ({**RUN, "accuracy_matrix": [[0.5, None], [0.4375]]},
                    "accuracy_matrix[1] has 1 entry, not 2: one per task of tasks"),
    "a cell beyond the diagonal": (cell(0, 1, 0.5), "accuracy_matrix[0][1] must be null (task 2 is trained after "
                                                    "training 1), got 0.5"),
    "tasks: []": ({**RUN, "tasks": []}, "tasks is empty: a run trains at least one task"),
    "flags as integers": ({**RUN, "test_flags": [[16], RUN["test_flags"][1]]},
                          "test_flags[0][0] must be a cell's flags, text '<n>:<base64>', got 16"),
    "flags of other examples": ({**RUN, "single_task_flags": ["8:ug==", RUN["single_task_flags"][1]]},
                                "single_task_flags[0] holds 8 flags, task 1's other cells 16: a task's cells are over "
                                "the same examples"),
    "an interval upside down": ({**RUN, "intervals": {**RUN["intervals"], "oa": [56.25, 21.875]}},
                                "intervals.oa must be [low, high] with low ≤ high, got [56.25, 21.875]"),
    "an interval of a cell out of [0, 1]": (
        {**RUN, "intervals": {**RUN["intervals"], "accuracy_matrix": [[[0.28, 1.5], None], [None, None]]}},
        "intervals.accuracy_matrix[0][0] must be an interval within [0, 1], got 1.5"),
    "a percentage out of range": ({**RUN, "oa": 150.0}, "oa must be a percentage in [0, 100], got 150"),
    "huge": ({**RUN, "fwt": 1e308}, "fwt = 1e+308 is larger than a run writes (float32 holds at most 3.4e+38)"),
    "MTL with a BWT": ({**RUN, "method": "mtl", "la": None}, "bwt must be null: mtl trains once on all tasks (a joint "
                                                               "method), so its runs have no bwt; got -6.25"),
    "a config value of the wrong kind": ({**RUN, "config": {**RUN["config"], "max_eval_per_task": "16"}},
                                         'config.max_eval_per_task must be a whole number, got "16"'),
    "unlabelled rows of other tasks": ({**RUN, "unlabelled_test": {**RUN["unlabelled_test"], "rows": {"mnli": 131}}},
                                       'unlabelled_test.rows must count each task of tasks, got ["mnli"]'),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_what_no_run_writes_is_named_in_one_line(case):
    data, problem = WRONG[case]
    with pytest.raises(JumpLoRAError) as error:
        RunResults.from_json(data, "r.json")
    assert str(error.value) == (f"r.json holds a wrong value ({problem}): no run writes that, so the file was changed "
                                "or damaged; run it again")


def test_joint_or_continual_comes_from_the_method_and_older_files_still_read():
    mtl = {"order": 1, "method": "mtl", "seed": 42, "tasks": ["t1", "t2"], "accuracy_matrix": [[0.7, 0.9]],
           "oa": 80.0, "bwt": None}
    assert RunResults.from_json(mtl).joint and not RunResults.from_json(LEGACY).joint
    assert RunResults.from_json({**RUN, "config": None}).config is None  # a run without a config: the report's
    # a plugin's method not installed here reads as continual
    assert not RunResults.from_json({**LEGACY, "method": "not-installed"}).joint
    with pytest.raises(JumpLoRAError, match=r"\(bwt is null, but inclora is a continual method"):
        RunResults.from_json({**mtl, "method": "inclora"})


# ---------------------------------------------------------------- every reader reads through it


def run_dir(folder: Path, data: dict, model: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(data))
    if model:  # what `jumplora eval` scores: a run directory's merged model
        (folder / "merged_model").mkdir()
        (folder / "merged_model" / "config.json").write_text("{}")
    return folder


def one_line(capsys, prefix: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(prefix) and "Traceback" not in err, err
    return err


def test_each_reader_refuses_a_damaged_file_with_the_schema_s_line(tmp_path, capsys):
    """report, track (a run directory, a grid folder), eval and examples/forgetting.py, through their entry points,
    and the sweep's reader: exit 2, one line naming the file and the field; nothing written, no store created."""
    import importlib.util

    from jumplora.config import RunConfig
    from jumplora.storage import Storage
    from ray_jobs import jobs, sweep

    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    bad = run_dir(tmp_path / "cell", cell(1, 0, "0.4375"))
    assert main(["report", str(bad), "--out", str(tmp_path / "report")]) == 2
    assert "holds a wrong value (accuracy_matrix[1][0] must be an accuracy" in one_line(capsys, "jumplora: error: ")
    mtl_like = run_dir(tmp_path / "bwt-null", {**RUN, "bwt": None})
    assert main(["track", str(mtl_like), "--tracking-uri", f"sqlite:///{store}"]) == 2
    assert f"{mtl_like}/results.json holds a wrong value (bwt is null" in one_line(capsys, "jumplora: error: ")
    grid = run_dir(tmp_path / "grid" / "run", {**RUN, "sparsity": RUN["sparsity"][:1]}).parent
    (grid / "manifest.json").write_text(json.dumps({"job": {"run": RunConfig().to_dict(), "lambdas_tried": [[0.0]]},
                                                    "stages": []}))
    assert main(["track", str(grid), "--tracking-uri", f"sqlite:///{store}"]) == 2
    assert "run/results.json holds a wrong value (sparsity has 1 entry, not 2" in one_line(capsys, "jumplora: error: ")
    old = run_dir(tmp_path / "old", {key: v for key, v in RUN.items() if key != "loss_curves"})
    assert main(["track", str(old), "--tracking-uri", f"sqlite:///{store}"]) == 2  # what logging needs
    assert "lacks 'loss_curves' (null or missing), which logging it to MLflow" in one_line(capsys, "jumplora: error: ")
    assert not store.exists() and not (tmp_path / "report").exists()

    scored = run_dir(tmp_path / "no-config", {**RUN, "config": None}, model=True)
    assert main(["eval", str(scored), "--quiet"]) == 2  # never every test example, silently
    assert (f"{scored}/results.json lacks 'config' (null or missing), which `jumplora eval` (to score the model as "
            "its run scored it) needs") in one_line(capsys, "jumplora: error: ")

    script = Path(__file__).resolve().parents[1] / "examples" / "forgetting.py"
    spec = importlib.util.spec_from_file_location("forgetting", script)
    forgetting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(forgetting)
    good, huge = run_dir(tmp_path / "good", RUN), run_dir(tmp_path / "huge", {**RUN, "la": 1e308})
    assert forgetting.main([good, huge]) == 2
    assert f"{huge}/results.json holds a wrong value (la = 1e+308 is larger" in one_line(capsys, "error: ")

    folder = Storage(str(tmp_path / "sweep"))
    folder.child("runs/r/run").write_json("results.json", {**RUN, "test_flags": [["x"], RUN["test_flags"][1]]})
    trial = jobs.Trial("r", jobs.Job(RunConfig(), folder.uri), jobs.Sequence(2))
    with pytest.raises(JumpLoRAError, match=r"runs/r/run/results.json holds a wrong value \(test_flags\[0\]\[0\] is "
                                            "not a cell's flags"):
        sweep.read_runs(sweep.Sweep("sc", ["jumplora+ella"], [1], [42], [trial], [], 2), folder)


def test_the_installed_command_refuses_a_damaged_file_in_one_line(tmp_path, installed_env):
    """As a user runs it, from outside the repository: NaN in a results.json read by `jumplora report`."""
    bad = run_dir(tmp_path / "run", {**RUN, "oa": float("nan")})
    done = subprocess.run([console_script(), "report", str(bad), "--out", str(tmp_path / "report")], cwd=tmp_path,
                          env=installed_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"jumplora: error: {bad}/results.json holds a number that is not finite (oa = nan): its training diverged, so "
        "none of its numbers means anything; run it again with a smaller learning rate: fix the file or leave its run "
        "out of the sources"]
    assert not (tmp_path / "report").exists()
