"""search_spaces/: every file loads and validates; the paper preset, λ tables and results equal SPEC."""

import math
import re
from pathlib import Path

import pytest

from jumplora import spaces
from jumplora.config import RunConfig
from jumplora.data.tasks import BENCHMARK_ORDERS
from jumplora.errors import JumpLoRAError
from jumplora.lambdas import resolve_lambdas
from jumplora.methods import METHODS

SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "SPEC.md"
# SPEC §5 defaults, transcribed (order 4-6 are given in words there).
SPEC_DEFAULTS = {1: [0, 3e4, 3e4, 3e4], 2: [0, 3e4, 3e4, 3e4], 3: [0, 3e4, 3e4, 3e4],
                 4: [0] + [5e5] * 13 + [5e7], 5: [0] + [5e6] * 11 + [5e7] * 3, 6: [0] + [5e5] * 14}
# SPEC §3 (and §1: ε, f_start, f_final).
SPEC_PAPER_SETTING = {"model": "google-t5/t5-large", "max_train_per_task": None, "max_eval_per_task": None,
                      "batch_size": 32, "lr": 1e-3, "weight_decay": 0.0, "grad_clip": 1.0, "rank": 8, "alpha": 32,
                      "target_modules": ("q", "v"), "lora_dropout": 0.1, "jump_dropout": 0.0, "bandwidth": 1e-3,
                      "jump_start": 0.2, "jump_final": 0.8, "max_source_tokens": 512, "max_target_tokens": 8}


def spec_text() -> str:
    if not SPEC.exists():
        pytest.skip(f"{SPEC} is not beside the repository")
    return SPEC.read_text()


def numbers(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def test_every_file_validates():
    spaces.validate_all()


def test_a_broken_file_is_refused(tmp_path):
    for source in spaces.SEARCH_SPACES.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    (tmp_path / "lambda_grid.yaml").write_text("grid: [1, 0, 100]\n")
    with pytest.raises(JumpLoRAError, match="positive"):
        spaces.validate_all(tmp_path)
    for grid in ("[1, .nan, 100]", "[1, .inf]"):
        (tmp_path / "lambda_grid.yaml").write_text(f"grid: {grid}\n")
        with pytest.raises(JumpLoRAError, match="lambda_grid.yaml: grid must be finite numbers"):
            spaces.validate_all(tmp_path)
    (tmp_path / "lambda_grid.yaml").write_text("grid: [1, 10]\n")
    (tmp_path / "lambdas.yaml").write_text("default:\n  1: [0, 3e4, 3e4, 3e4]\n")  # YAML 1.1: 3e4 is a string
    with pytest.raises(JumpLoRAError, match="numbers"):
        spaces.validate_all(tmp_path)


def test_a_broken_halving_layout_is_refused(tmp_path):
    for source in spaces.SEARCH_SPACES.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    assert spaces.halving(tmp_path) == spaces.halving()
    for text, message in (("rungs: [0.3, 0.1]\neta: 2\nrung_examples: 8\n", "rungs must be increasing fractions"),
                          ("rungs: [0.1, 1.0]\neta: 2\nrung_examples: 8\n", "rungs must be increasing fractions"),
                          ("rungs: [0.1]\neta: 1\nrung_examples: 8\n", "eta must be an integer ≥ 2"),
                          ("rungs: [0.1]\neta: 2\nrung_examples: 0\n", "rung examples must be an integer ≥ 1")):
        (tmp_path / "halving.yaml").write_text(text)
        with pytest.raises(JumpLoRAError, match=f"halving.yaml: {message}"):
            spaces.validate_all(tmp_path)


def test_paper_preset_is_spec_section_3():
    paper = RunConfig(**spaces.preset("paper"))
    assert {key: getattr(paper, key) for key in SPEC_PAPER_SETTING} == SPEC_PAPER_SETTING


def test_default_lambda_tables_equal_spec_and_are_what_run_config_uses():
    tables = spaces.lambda_tables()["default"]
    assert tables == SPEC_DEFAULTS
    assert all(resolve_lambdas(RunConfig(order=order), len(tables[order])) == tables[order] for order in tables)
    assert resolve_lambdas(RunConfig(order=1, method="inclora"), 4) == [0.0] * 4
    with pytest.raises(JumpLoRAError, match="has 4 values but the order has 3 tasks: pass --lambdas with 3 values"):
        resolve_lambdas(RunConfig(order=1), 3)  # a tasks.json whose order 1 has 3 tasks


def test_a_method_without_a_paper_table_refuses_the_paper_lambdas_in_one_line(monkeypatch, capsys, tmp_path):
    """A plugin's method with a per-task λ gets no other method's table: `--lambdas paper` (the default) is refused,
    naming the way out; its own numbers are taken."""
    from jumplora.adapters import LORA
    from jumplora.cli import main
    from jumplora.methods import MethodSpec

    monkeypatch.setitem(METHODS.specs, "l1", MethodSpec("l1", adapter=LORA, per_task_lambda=True))
    expected = ("--lambdas paper: l1 has no paper λ table (search_spaces/lambdas.yaml holds the paper's for ella, "
                "jumplora+ella and a constant for ewc, and its MethodSpec has no default_lambda): pass --lambdas "
                "v1,v2,... (one λ per task, 0 first), or choose them per task with ray_jobs/grid_lambda.py --method "
                "l1")
    with pytest.raises(JumpLoRAError) as refused:
        resolve_lambdas(RunConfig(order=1, method="l1"), 4)
    assert str(refused.value) == expected
    assert resolve_lambdas(RunConfig(order=1, method="l1", lambdas=[0.0, 5.0, 5.0, 5.0]), 4) == [0.0, 5.0, 5.0, 5.0]
    out = tmp_path / "run"
    assert main(["run", "--method", "l1", "--order", "1", "--data-dir", "synthetic", "--out", str(out),
                 "--no-tracking", "--quiet"]) == 2
    assert capsys.readouterr().err == f"jumplora: error: {expected}\n" and not out.exists()
    # a plugin's own default λ (`MethodSpec.default_lambda`): 0, then it for every later task of the order
    monkeypatch.setitem(METHODS.specs, "l1", MethodSpec("l1", adapter=LORA, per_task_lambda=True, default_lambda=0.5))
    assert resolve_lambdas(RunConfig(order=1, method="l1"), 4) == [0.0, 0.5, 0.5, 0.5]
    with pytest.raises(JumpLoRAError, match="^method 'l1': its default_lambda must be a number ≥ 0 of a per-task-λ "):
        MethodSpec("l1", adapter=LORA, default_lambda=0.5)


def test_a_grid_stage_tries_the_methods_own_grid_else_spec_section_5s(monkeypatch):
    from jumplora.adapters import LORA
    from jumplora.methods import MethodSpec

    spec_grid = [1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]  # SPEC §5
    assert all(spaces.method_grid(name) == spec_grid for name, spec in METHODS.items() if spec.per_task_lambda)
    monkeypatch.setitem(METHODS.specs, "l1", MethodSpec("l1", adapter=LORA, per_task_lambda=True,
                                                        lambda_grid=(1e-4, 1e-3, 1e-2)))
    assert spaces.method_grid("l1") == [1e-4, 1e-3, 1e-2]


@pytest.mark.parametrize(("grid", "per_task_lambda"), [
    ((), True), ((1e-3, 0.0), True), ((1e-3, -1.0), True), ((1e-3, math.inf), True), ((1e-3, math.nan), True),
    ((1e-3, 1e-3), True), ([1e-3, 1e-2], True), ((1e-3,), False)])
def test_a_malformed_lambda_grid_is_refused_in_one_line(grid, per_task_lambda):
    from jumplora.adapters import LORA
    from jumplora.methods import MethodSpec

    with pytest.raises(JumpLoRAError) as refused:
        MethodSpec("l1", adapter=LORA, per_task_lambda=per_task_lambda, lambda_grid=grid)
    assert str(refused.value) == ("method 'l1': its lambda_grid must be a tuple of positive λ, each once, of a "
                                  f"per-task-λ method (per_task_lambda=True), got {grid!r}")


def test_grid_results_equal_spec_section_5():
    found = re.findall(r"^- (sparse|interpolated), order (\d): `([^`]+)`", spec_text(), flags=re.MULTILINE)
    assert len(found) == 6
    grid = spaces.lambda_tables()["grid"]["jumplora+ella"]["global"]
    assert {(delta, int(order)): numbers(values) for delta, order, values in found} == {
        (delta, order): values for delta, by_order in grid.items() for order, values in by_order.items()}


def test_lambda_grid_equals_spec_section_5():
    found = re.search(r"try λ ∈ \{([^}]+)\}", spec_text())
    assert spaces.lambda_grid() == numbers(found.group(1))


def test_paper_results_equal_spec_section_6():
    rows = re.findall(r"^\| (IncLoRA|JumpLoRA\+IncLoRA|ELLA|JumpLoRA\+ELLA) \|(.+)\|$", spec_text(), re.MULTILINE)
    columns = [1, 2, 3, "sc", 4, 5, 6, "ls"]
    expected = {name.lower(): dict(zip(columns, numbers(values.replace("|", ",")), strict=True))
                for name, values in rows}
    paper = spaces.paper_results()["oa"]
    assert {method: paper[method] for method in expected} == expected
    ewc = re.search(r"^\| EWC \(reported by ELLA\) \|(.+)\|$", spec_text(), re.MULTILINE)  # SPEC §7's baseline
    assert paper["ewc"] == dict(zip(columns, numbers(ewc.group(1).replace("|", ",")), strict=True))


def test_paper_configurations_per_method():
    methods = spaces.methods_file()["methods"]
    assert sorted(methods) == sorted(METHODS)  # every built-in method: reproduce.py runs them all, in this order
    assert all(set(by_benchmark) == set(BENCHMARK_ORDERS) for by_benchmark in methods.values())
    assert methods["jumplora+inclora"] == {"sc": {"threshold": "per_block"}, "ls": {"threshold": "global"}}
    assert methods["jumplora+ella"] == {"sc": {"threshold": "global", "ella_delta": "sparse"},
                                        "ls": {"threshold": "per_block", "ella_delta": "sparse"}}
    # SPEC §7's baselines in their defaults (O-LoRA's λ1 = 0.5, λ2 = 0 are RunConfig's); JumpLoRA+O-LoRA groups its
    # threshold as JumpLoRA+IncLoRA does
    assert all(methods[m] == {"sc": {}, "ls": {}} for m in ("ewc", "seqft", "o-lora", "mtl"))
    assert methods["jumplora+o-lora"] == methods["jumplora+inclora"]
    olora = RunConfig.of({"method": "o-lora", **methods["o-lora"]["sc"]})
    assert (olora.settings.olora_lambda1, olora.settings.olora_lambda2) == (0.5, 0.0)
