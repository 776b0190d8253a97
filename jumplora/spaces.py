"""The one loader of `search_spaces/` (YAML), every file validated: λ grid and its halving search, the paper's λ
tables (`jumplora.lambdas` reads them for `--lambdas paper` / `paper-grid`), method configurations, run presets and
the paper's numbers (`jumplora report` and `reproduce.py` print them). The orders and benchmarks themselves live in
`jumplora.data.tasks`."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import yaml

from jumplora.config import RUN_FIELDS, RunConfig
from jumplora.data.tasks import BENCHMARK_ORDERS, PAPER_ORDERS
from jumplora.errors import JumpLoRAError
from jumplora.methods import METHODS, check

# The repository's folder (a checkout or an editable install), else the copy a wheel installs (pyproject data-files).
SEARCH_SPACES = next((folder for folder in (Path(__file__).resolve().parents[1] / "search_spaces",
                                            Path(sys.prefix) / "share" / "jumplora" / "search_spaces")
                      if folder.is_dir()), Path(__file__).resolve().parents[1] / "search_spaces")


def load(name: str, directory: Path = SEARCH_SPACES) -> dict:
    path = directory / name
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise JumpLoRAError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise JumpLoRAError(f"{path} must hold a mapping at the top level")
    return data


def positive_numbers(values, what: str) -> list[float]:
    if not isinstance(values, list) or not values or not all(isinstance(v, int | float) for v in values):
        raise JumpLoRAError(f"{what} must be a non-empty list of numbers, got {values!r}")
    if not all(math.isfinite(v) for v in values):
        raise JumpLoRAError(f"{what} must be finite numbers, got {values!r}")
    if any(v <= 0 for v in values):
        raise JumpLoRAError(f"{what} must be positive, got {values!r}")
    return [float(v) for v in values]


def lambda_grid(directory: Path = SEARCH_SPACES) -> list[float]:
    return positive_numbers(load("lambda_grid.yaml", directory).get("grid"), "lambda_grid.yaml: grid")


def method_grid(method: str, directory: Path = SEARCH_SPACES) -> list[float]:
    """The λ a grid stage of `method` tries by default: its own (`MethodSpec.lambda_grid`), else SPEC §5's grid."""
    own = METHODS[method].lambda_grid
    return [float(lam) for lam in own] if own is not None else lambda_grid(directory)


def check_halving(rungs, eta, rung_examples, where: str) -> dict:
    """The successive-halving layout of a λ search: rung fractions strictly increasing in (0, 1), η an integer ≥ 2,
    at least one dev example a task at a rung."""
    if not isinstance(rungs, list) or not rungs or not all(isinstance(v, int | float) and 0 < v < 1 for v in rungs) \
            or any(a >= b for a, b in zip(rungs, rungs[1:], strict=False)):
        raise JumpLoRAError(f"{where} rungs must be increasing fractions of a task's steps in (0, 1), e.g. "
                            f"0.11,0.33; got {rungs!r}")
    if not isinstance(eta, int) or isinstance(eta, bool) or eta < 2:
        raise JumpLoRAError(f"{where} eta must be an integer ≥ 2 (the best 1/η go on at a rung), got {eta!r}")
    if not isinstance(rung_examples, int) or isinstance(rung_examples, bool) or rung_examples < 1:
        raise JumpLoRAError(f"{where} rung examples must be an integer ≥ 1, got {rung_examples!r}")
    return {"rungs": [float(v) for v in rungs], "eta": eta, "rung_examples": rung_examples}


def halving(directory: Path = SEARCH_SPACES) -> dict:
    """{"rungs": [fraction, ...], "eta": η, "rung_examples": n}: the defaults of `grid_lambda.py --search halving`."""
    data = load("halving.yaml", directory)
    return check_halving(data.get("rungs"), data.get("eta"), data.get("rung_examples"), "halving.yaml:")


def check_table(order, values, where: str) -> list[float]:
    if order not in PAPER_ORDERS:
        raise JumpLoRAError(f"{where}: unknown order {order!r}")
    if not isinstance(values, list) or len(values) != len(PAPER_ORDERS[order]):
        raise JumpLoRAError(f"{where}: order {order} needs {len(PAPER_ORDERS[order])} values, got {values!r}")
    if values[0] != 0:
        raise JumpLoRAError(f"{where}: the first task's λ must be 0, got {values[0]!r}")
    positive_numbers(values[1:], f"{where} (tasks 2..)")
    return [float(v) for v in values]


def lambda_tables(directory: Path = SEARCH_SPACES) -> dict:
    """{"default": {order: λs}, "default_methods": [method], "grid": {method: {threshold: {ella_delta: {order: λs}}}},
    "constant": {method: λ}}, every table checked."""
    data = load("lambdas.yaml", directory)
    tables = {"default": {o: check_table(o, v, f"lambdas.yaml default[{o}]") for o, v in data["default"].items()},
              "default_methods": list(data.get("default_methods", [])), "grid": {}, "constant": {}}
    for method in tables["default_methods"]:
        if method not in METHODS or not METHODS[method].per_task_lambda:
            raise JumpLoRAError(f"lambdas.yaml default_methods: {method!r} is not a method with a per-task λ")
    for method, value in data.get("constant", {}).items():
        if method not in METHODS or not METHODS[method].per_task_lambda:
            raise JumpLoRAError(f"lambdas.yaml constant.{method}: not a method with a per-task λ")
        tables["constant"][method] = positive_numbers([value], f"lambdas.yaml constant.{method}")[0]
    for method, by_threshold in data.get("grid", {}).items():
        for threshold, by_delta in by_threshold.items():
            for delta, by_order in by_delta.items():
                where = f"lambdas.yaml grid.{method}.{threshold}.{delta}"
                RunConfig(method=method, threshold=threshold, settings={"ella_delta": delta})
                tables["grid"].setdefault(method, {}).setdefault(threshold, {})[delta] = {
                    o: check_table(o, v, f"{where}[{o}]") for o, v in by_order.items()}
    return tables


def paper_lambdas(table: str, config: RunConfig) -> list[float]:
    """`paper`: SPEC §5's defaults for the order (a method in `constant`, or a plugin with a `default_lambda`: 0,
    then its value for every later task); `paper-grid`: the paper's grid results for this configuration."""
    tables, method, delta = lambda_tables(), config.method, config.setting("ella_delta")
    if table == "paper":
        constant = tables["constant"].get(method)
        if constant is None and method not in tables["default_methods"] and method in METHODS:
            constant = METHODS[method].default_lambda  # a plugin's own (`MethodSpec.default_lambda`)
        if constant is not None and config.order in PAPER_ORDERS:
            return [0.0] + [constant] * (len(PAPER_ORDERS[config.order]) - 1)
        if method not in tables["default_methods"]:
            raise JumpLoRAError(
                f"--lambdas paper: {method} has no paper λ table (search_spaces/lambdas.yaml holds the paper's for "
                f"{', '.join(tables['default_methods'])} and a constant for {', '.join(tables['constant'])}, and its "
                f"MethodSpec has no default_lambda): pass --lambdas v1,v2,... (one λ per task, 0 first), or choose "
                f"them per task with ray_jobs/grid_lambda.py --method {method}")
        found, which = tables["default"].get(config.order), ""
    else:
        found = tables["grid"].get(method, {}).get(config.threshold, {}).get(delta, {}).get(config.order)
        which = f", method {method}, threshold {config.threshold}, ella delta {delta}"
    if found is None:
        raise JumpLoRAError(f"search_spaces/lambdas.yaml has no {table} λ table for order {config.order}{which}: "
                            f"pass --lambdas v1,v2,...")
    return found


def presets(directory: Path = SEARCH_SPACES) -> dict[str, dict]:
    data = load("presets.yaml", directory)
    for name, fields in data.items():
        unknown = set(fields) - RUN_FIELDS
        if unknown:
            raise JumpLoRAError(f"presets.yaml {name}: unknown RunConfig fields {sorted(unknown)}")
        RunConfig.of(fields)
    return data


def preset(name: str) -> dict:
    known = presets()
    if name not in known:
        raise JumpLoRAError(f"unknown preset {name!r}: choose one of {', '.join(known)} (search_spaces/presets.yaml)")
    return dict(known[name])


def methods_file(directory: Path = SEARCH_SPACES) -> dict:
    """{"methods": {method: {benchmark: RunConfig fields}}}, checked: one configuration per benchmark of
    `BENCHMARK_ORDERS`."""
    data = load("methods.yaml", directory)
    for method, by_benchmark in data["methods"].items():
        if method not in METHODS or set(by_benchmark) != set(BENCHMARK_ORDERS):
            raise JumpLoRAError(f"methods.yaml {method}: needs a configuration for each of {list(BENCHMARK_ORDERS)}")
        for fields in by_benchmark.values():
            check(RunConfig.of({"method": method, **fields}))
    return data


def paper_results(directory: Path = SEARCH_SPACES) -> dict:
    data = load("paper_results.yaml", directory)
    for metric in ("oa", "bwt", "fwt"):
        for method, values in data[metric].items():
            if not all(isinstance(v, int | float) for v in values.values()):
                raise JumpLoRAError(f"paper_results.yaml {metric}.{method}: values must be numbers")
    return data


def validate_all(directory: Path = SEARCH_SPACES) -> None:
    """Load every file of `directory`; raise JumpLoRAError on the first problem."""
    for load_file in (lambda_grid, halving, lambda_tables, presets, methods_file, paper_results):
        load_file(directory)
