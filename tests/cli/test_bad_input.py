"""Bad input: one clear line on stderr, a non-zero exit, no traceback, and no results.json."""

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from jumplora import tiny
from jumplora.cli import main
from tests.conftest import console_script


def write_folder(root, train_json="[]", order=("a", "b", "c")):
    """A CL_Benchmark folder whose tasks a, b, c share one train.json text (for the malformed-file case)."""
    root.mkdir(parents=True)
    tasks = {name: {"path": f"G/{name}", "instruction": "Which?\n", "options": ["x", "y"]} for name in "abc"}
    (root / "tasks.json").write_text(json.dumps({"orders": {"1": list(order)}, "tasks": tasks}))
    for name in "abc":
        folder = root / "G" / name
        folder.mkdir(parents=True)
        (folder / "train.json").write_text(train_json)
        for split in ("dev", "test"):
            (folder / f"{split}.json").write_text(json.dumps([{"sentence": f"{split} s", "label": "x"}]))
    return root


CASES = {
    "missing data dir": (["--data-dir", "/nonexistent/CL_Benchmark"], "does not exist"),
    "unknown order": (["--order", "9"], "unknown order 9"),
    "unknown method": (["--method", "lwf"], "invalid choice"),
    "λ list of the wrong length": (["--method", "ella", "--lambdas", "0,1e3"], "2 values but order 1 has 4"),
    "negative λ": (["--method", "ella", "--lambdas", "0,1,-1,1"], "value 3 of '0,1,-1,1': expected a number ≥ 0"),
    "f_start ≥ f_final": (["--jump-start", "0.8", "--jump-final", "0.5"], "f_start < f_final"),
    "non-positive bandwidth": (["--bandwidth", "0"], "argument --bandwidth: expected a number > 0, got 0"),
    "too few examples for three steps": (["--max-train-per-task", "64"],
                                         "task 'dbpedia' has 64 training examples: 2 step(s) at batch 32; a task "
                                         "trains at least 3 optimizer steps (SPEC §1): at least 65 examples are "
                                         "needed for 3 steps (raise --max-train-per-task or lower --batch-size)"),
    "no task": (["--max-tasks", "0"], "expected a number ≥ 1"),
    "more micro-batches than examples": (["--batch-size", "4", "--micro-batches", "5"], "and the batch size 4"),
    "bf16 on the CPU": (["--precision", "bf16", "--device", "cpu"], "--precision bf16 needs a CUDA device"),
    "NaN λ": (["--method", "ella", "--lambdas", "0,1,nan,3"], "value 3 of '0,1,nan,3': expected a finite number"),
    "infinite λ": (["--method", "ella", "--lambdas", "0,1,inf,3"], "value 3 of '0,1,inf,3': expected a finite number"),
    "NaN learning rate": (["--lr", "nan"], "argument --lr: expected a finite number, got nan"),
    "infinite learning rate": (["--lr", "inf"], "argument --lr: expected a finite number, got inf"),
    "infinite bandwidth": (["--bandwidth", "inf"], "argument --bandwidth: expected a finite number, got inf"),
    "unknown device": (["--device", "gpu"], "argument --device: expected auto, cpu, cuda or cuda:N, got 'gpu': the "
                                            "runs train on the CPU or on CUDA only"),
    "missing model directory": (["--model", "/no/such/dir", "--data-dir", "synthetic"],
                                "model directory /no/such/dir does not exist"),
    "missing relative model directory": (["--model", "./no-such-dir", "--data-dir", "synthetic"],
                                         "model directory ./no-such-dir does not exist"),
    "a real model without data": (["--model", "google-t5/t5-small"], "build it there with `jumplora data build`"),
    # round 2: inputs that were ignored, or trained on something else than asked
    "an empty λ field": (["--method", "ella", "--lambdas", "0,,1e3,1e3,1e3"],
                         "argument --lambdas: '0,,1e3,1e3,1e3' has an empty value at position 2 of 5"),
    "a target module the model lacks": (["--target-modules", "q,nonexistent"],
                                        "--target-modules: the model has no linear layer named nonexistent; its "
                                        "linear layers are named k, lm_head, o, q, v, wi, wo"),
    "a prompt longer than --max-source-tokens": (["--max-source-tokens", "1"],
                                                 "task 'dbpedia': its prompt (instruction + options) takes"),
    "an empty --out": (["--out", ""], "argument --out: expected a folder to write, got ''"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_run_arguments(case, tmp_path, capsys, tiny_cache):
    args, message = CASES[case]
    code = main(["run", "--quiet", "--out", str(tmp_path / "run"), "--cache-dir", str(tiny_cache), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert message in err
    assert not (tmp_path / "run" / "results.json").exists()


# Divergence that used to end "successfully" (NaN τ or loss, OA 0.00) or only in task 2: stopped at the end of task 1
# (of 2), naming the task, the first non-finite step and the setting the user changed. (jumplora+ella at --lr 1e10
# diverges as the bandwidth case does, a NaN CE: its message is among those of tests/continual/test_divergence.py.)
DIVERGED = {
    "a vanishing bandwidth": (["--bandwidth", "1e-300"], "--bandwidth 1e-300 (default 0.001)"),
    "inclora at lr 1e10": (["--method", "inclora", "--lr", "1e10"], "--lr 1e+10 (default 0.001)"),
    "jumplora+ella at alpha 1e30": (["--alpha", "1e30"], "--alpha 1e+30 (default 32)"),
}


@pytest.mark.parametrize("case", list(DIVERGED))
def test_diverged_training_stops_in_task_1_naming_the_step_and_the_setting(case, tmp_path, tiny_cache, capsys):
    args, setting = DIVERGED[case]
    out = tmp_path / "run"
    code = main(["run", "--quiet", "--no-tracking", "--max-tasks", "2", "--max-train-per-task", "65",
                 "--max-eval-per-task", "8", "--out", str(out), "--cache-dir", str(tiny_cache), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("jumplora: error: training diverged in task 1 (dbpedia): ")
    assert re.search(r"the loss is not finite from step \d of 3 on|no step of 3 moved the adapter", err), err
    assert f"likely setting: {setting}: bring it towards its default" in err
    assert not (out / "results.json").exists() and not (out / "checkpoints").exists()


@pytest.mark.parametrize("option", ["--save-model", "--out"])
def test_a_model_or_run_directory_that_is_a_file_is_refused_before_training(option, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    other = ["--out", str(tmp_path / "run")] if option == "--save-model" else []
    assert main(["run", "--quiet", option, str(blocker), *other, "--cache-dir", str(tmp_path / "cache")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jumplora: error: argument {option}: {blocker} is a file: pass a folder to write (see `jumplora run --help`)"]
    assert sorted(tmp_path.iterdir()) == [blocker] and blocker.read_text() == "keep"


def test_a_cut_off_model_file_is_one_line(tmp_path, tiny_cache, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny.named_model_dir(tiny.TINY, None, tiny_cache, progress=False), model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["run", "--quiet", "--model", str(model), "--data-dir", "synthetic", "--out", str(tmp_path / "run")]) \
        == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"jumplora: error: cannot load model '{model}' (")
    assert not (tmp_path / "run").exists()


def test_a_task_named_twice_in_tasks_json_is_refused(tmp_path, capsys):
    data = write_folder(tmp_path / "data", train_json=TRAIN)
    text = (data / "tasks.json").read_text()
    entry = '"b": {"path": "G/a", "instruction": "Which?\\n", "options": ["x", "y"]}, '
    (data / "tasks.json").write_text(text.replace('"tasks": {', '"tasks": {' + entry))
    code = main(["run", "--quiet", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jumplora: error: {data / 'tasks.json'}: the key 'b' appears 2 times in one object: JSON keeps only the last "
        "one, so the earlier entry would be silently replaced: rename or remove one of them"]


def test_an_option_too_long_for_the_prompt_is_refused_before_training(tmp_path, tiny_cache, capsys):
    data = write_folder(tmp_path / "data", train_json=TRAIN)
    tasks = json.loads((data / "tasks.json").read_text())
    tasks["tasks"]["b"]["options"] = ["x", "word " * 1000]
    (data / "tasks.json").write_text(json.dumps(tasks))
    model = tiny.named_model_dir(tiny.TINY, None, tiny_cache, progress=False)  # the synthetic data's preset
    code = main(["run", "--quiet", "--method", "inclora", "--data-dir", str(data), "--model", str(model),
                 "--batch-size", "1", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("jumplora: error: task 'b': its prompt (instruction + options) takes ")
    assert err[0].endswith("of the --max-source-tokens 512 tokens, leaving no room for the text: raise "
                           "--max-source-tokens or shorten the task's instruction or options")


@pytest.mark.parametrize(("available", "count", "device", "message"), [
    (False, 0, "cuda", "argument --device: cuda: this machine has no CUDA device: use --device cpu or auto"),
    (True, 1, "cuda:3", "argument --device: cuda:3: this machine has 1 CUDA device(s), numbered from 0"),
])
def test_a_cuda_device_the_machine_lacks(available, count, device, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    code = main(["run", "--quiet", "--device", device, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("inside", [False, True])
def test_out_is_a_file(inside, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    out = blocker / "run" if inside else blocker
    code = main(["run", "--quiet", "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    where = f"is inside the file {blocker}" if inside else "is a file"
    assert err == f"jumplora: error: argument --out: {out} {where}: pass a folder to write (see `jumplora run --help`)"
    assert blocker.read_text() == "keep" and sorted(tmp_path.iterdir()) == [blocker]


TRAIN = json.dumps([{"sentence": f"train {i}", "label": "x"} for i in range(3)])


@pytest.mark.parametrize(("split", "records", "why"), [
    ("test", [], "its file lists none"),
    ("test", [{"sentence": "s1", "label": "z"}, {"sentence": "s2", "label": "z"}],
     "2 dropped, label not an option ('z': 2)"),
    ("dev", [{"sentence": " ", "label": "x"}], "1 dropped, empty text"),
    ("train", [{"sentence": "t", "label": "w"}, {"sentence": "", "label": "x"}],
     "1 dropped, label not an option ('w': 1); 1 dropped, empty text"),
])
def test_a_split_left_empty_is_refused_before_training(split, records, why, tmp_path, capsys):
    data = write_folder(tmp_path / "data", train_json=TRAIN)
    (data / "G" / "b" / f"{split}.json").write_text(json.dumps(records))
    code = main(["run", "--quiet", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err == (f"jumplora: error: task 'b' of {data}: its {split} split has no usable example after validation "
                   f"({why}): fix the data")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("path", ["../../../../etc", "/etc", "G/../../outside"])
def test_a_task_path_outside_the_data_directory_is_refused(path, tmp_path, capsys):
    data = write_folder(tmp_path / "data", train_json=TRAIN)
    tasks = json.loads((data / "tasks.json").read_text())
    tasks["tasks"]["b"]["path"] = path
    (data / "tasks.json").write_text(json.dumps(tasks))
    code = main(["run", "--quiet", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"task 'b': path {path!r} leaves the data directory" in err
    assert not (tmp_path / "run").exists()


def test_malformed_data_file(tmp_path, capsys):
    data = write_folder(tmp_path / "data", train_json="[{\"sentence\": ")
    code = main(["run", "--quiet", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "train.json" in err
    assert not (tmp_path / "run").exists()


def test_unknown_task_in_an_order(tmp_path, capsys):
    data = write_folder(tmp_path / "data", order=("a", "b", "zz"))
    code = main(["run", "--quiet", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "zz" in err


@pytest.mark.parametrize("command", [[console_script()], [sys.executable, "-m", "jumplora"]],
                         ids=["console script", "python -m jumplora"])
def test_no_traceback_from_the_installed_command(command, tmp_path, installed_env):
    """As a user runs it: the installed command, from a folder outside the repository."""
    result = subprocess.run([*command, "run", "--order", "7", "--out", str(tmp_path / "run")], cwd=tmp_path,
                            env=installed_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["jumplora: error: unknown order 7: choose one of 1, 2, 3, 4, 5, 6 "
                                                  "(see `jumplora orders`)"]


TOO_LONG = ("File name too long: a name in the path is longer than the file system takes (255 bytes), or the whole "
            "path (4096): use a shorter path")
FILE_STORE = ("is refused by MLflow (The filesystem tracking backend (e.g., './mlruns') is in maintenance mode and "
              "will not receive further updates): use a database store such as sqlite:///runs/mlflow.db, or set "
              "MLFLOW_ALLOW_FILE_STORE=true, or pass another --tracking-uri")
# what the operating system or a library refuses once the arguments are parsed (a path no parser checks, a name made
# from one, a folder that holds no tokenizer, a store MLflow will not open): argv, then the line, in `tmp` (a run is
# given the session's presets: before, one on a file store trained)
REFUSED_LATER = {
    "a report source too long": (lambda tmp: ["report", str(tmp / ("x" * 256)), "--out", str(tmp / "report")],
                                 lambda tmp: f"{tmp / ('x' * 256)}: {TOO_LONG}"),
    "a track source too long": (lambda tmp: ["track", str(tmp / ("x" * 256))],
                                lambda tmp: f"{tmp / ('x' * 256)}: {TOO_LONG}"),
    "an --out whose staging name is too long": (
        lambda tmp: ["run", "--no-tracking", "--quiet", "--out", str(tmp / ("y" * 250))],
        lambda tmp: f"{tmp / ('.' + 'y' * 250 + '.staging')}: {TOO_LONG}"),
    "a --tokenizer folder without one": (
        lambda tmp: ["data", "check", str(tmp), "--tokenizer", str(tmp)],
        lambda tmp: f"--tokenizer {tmp}: cannot load a tokenizer (Couldn't instantiate the backend tokenizer from one "
                    "of: ): pass a hub name or a folder written by save_pretrained"),
    "report on a file store": (lambda tmp: ["report", "jumplora-order1", "--out", str(tmp / "report"),
                                            "--tracking-uri", str(tmp / "store")],
                               lambda tmp: f"the MLflow store {tmp / 'store'} {FILE_STORE}"),
    "track on a file store": (lambda tmp: ["track", str(tmp), "--tracking-uri", f"file://{tmp / 'store'}"],
                              lambda tmp: f"the MLflow store file://{tmp / 'store'} {FILE_STORE}"),
    "run on a file store": (lambda tmp: ["run", "--quiet", "--out", str(tmp / "run"), "--max-tasks", "1",
                                         "--max-train-per-task", "65", "--max-eval-per-task", "8", "--tracking-uri",
                                         str(tmp / "store")],
                            lambda tmp: f"the MLflow store {tmp / 'store'} {FILE_STORE} or --no-tracking"),
}


@pytest.mark.parametrize("case", list(REFUSED_LATER))
def test_what_the_system_or_a_library_refuses_later_is_bad_input(case, tmp_path, capsys, monkeypatch, tiny_cache):
    """Before: an OSError about a path the user gave ended in "internal error … exit 3", a library's refusal of a
    tokenizer folder too, and a file store, which MLflow 3 refuses, in exit 3 (report, track) or in a run that
    trained without its logging."""
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    (tmp_path / "checkpoints").mkdir()  # what makes `tmp_path` a run directory cut off (track's source)
    argv, line = REFUSED_LATER[case]
    given = argv(tmp_path)
    assert main([*given, "--cache-dir", str(tiny_cache)] if given[0] == "run" else given) == 2
    assert capsys.readouterr().err.splitlines() == [f"jumplora: error: {line(tmp_path)}"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoints"]


def test_a_completed_run_is_not_overwritten(tmp_path, capsys):
    from jumplora import ownership

    completed = json.dumps({"method": "inclora", "order": 1, "seed": 42, "oa": 0.5, "bwt": -0.1})
    with ownership.Target(tmp_path, ownership.RUN, "jumplora run", "--out") as written:  # recorded as a run writes
        ownership.write_text(written.path / "results.json", completed)
    assert main(["run", "--quiet", "--out", str(tmp_path)]) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert (tmp_path / "results.json").read_text() == completed
    (tmp_path / "results.json").write_text(completed + " ")  # changed since: not the product's to replace
    assert main(["run", "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "results.json changed since jumplora wrote it" in err and "pass --overwrite" not in err


def test_orders_lists_the_paper_orders(capsys):
    assert main(["orders"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1: dbpedia, amazon, yahoo, agnews"
    assert len(lines) == 6 and lines[3].startswith("4: mnli, cb, wic, copa")
