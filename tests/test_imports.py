"""The import graph, read from the source (every import, at the top or inside a function; `if TYPE_CHECKING:` blocks
are not run, so not counted): no circle in `jumplora/`, the methods never import the data package, `ray_jobs/` never
imports the adapters, `jumplora.config` and `jumplora.families` are leaves, the continual loop reads top-down. And
what a fresh interpreter loads, transitively: the registry, the options and what reads results load no model library;
the entry scripts' --help and the grid's driver no model code."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def module_names(root: Path, package: str) -> dict[str, Path]:
    names = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def imported(path: Path) -> list[str]:
    """Every module name an import statement of `path` names (`from a.b import c` → `a.b.c`, which may be a name
    inside `a.b`), outside `if TYPE_CHECKING:` blocks."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def graph(root: Path, package: str = "jumplora") -> dict[str, set[str]]:
    """module → the modules of `package` it imports: each name resolved to the longest module it names (a parent
    package runs first on import anyway, so importing `a.b` is not counted as importing `a`)."""
    modules = module_names(root, package)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_the_circle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text("def x():\n    from pkg import c\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    assert circles(graph(tmp_path, "pkg")) == []  # the way back from c to a is for the type checker only
    (package / "c.py").write_text("import pkg.a\n")
    assert circles(graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_jumplora_has_no_import_circle():
    assert circles(graph(REPO)) == []


def test_config_is_a_leaf_and_its_kinds_and_errors_too():
    edges = graph(REPO)
    assert edges["jumplora.config"] <= {"jumplora.errors", "jumplora.kinds"}
    assert edges["jumplora.kinds"] == set()
    assert edges["jumplora.errors"] == set()
    assert edges["jumplora.families"] == set()


# asking which methods and options exist, or reading and drawing a run's results
READERS = ("jumplora.methods.registry", "jumplora.options", "jumplora.record", "jumplora.plots", "jumplora.outputs",
           "jumplora.spaces", "jumplora.report.render")


def test_the_registry_the_options_and_the_result_readers_load_no_model_library():
    probe = (f"import sys; import {', '.join(READERS)}; "
             "print(' '.join(name for name in ('transformers', 'peft') if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == []  # each loads transformers (~3,500 modules, 6 s) only where a model is built


@pytest.mark.parametrize(("importer", "imported_package"), [("jumplora.methods", "jumplora.data"),
                                                            ("ray_jobs", "jumplora.adapters")])
def test_layers_that_must_not_import_each_other(importer, imported_package):
    modules = {**module_names(REPO, "jumplora"), **module_names(REPO, "ray_jobs")}
    inside = lambda name, package: name == package or name.startswith(f"{package}.")  # noqa: E731
    offenders = [f"{name} imports {target}" for name, path in sorted(modules.items()) if inside(name, importer)
                 for target in imported(path) if inside(target, imported_package)]
    assert offenders == []


CLI_LAYER = ("jumplora.cli", "jumplora.cli_run", "jumplora.cli_eval", "jumplora.cli_track", "jumplora.__main__",
             "jumplora.options")


def test_the_library_never_imports_the_command_line_layer():
    """The loop, the data, the outputs read their settings from RunConfig, not from the parsers built on it."""
    offenders = [f"{name} imports {target}" for name, targets in sorted(graph(REPO).items()) if name not in CLI_LAYER
                 for target in sorted(targets) if target in CLI_LAYER]
    assert offenders == []


# the continual loop's modules, each importing only those before it (`jumplora/continual/__init__.py` gathers them)
CONTINUAL = ("workspace", "divergence", "evaluation", "loop", "single_task", "summary")


def test_the_continual_loop_reads_top_down_set_up_loop_a0_summary():
    edges = graph(REPO)
    modules = [f"jumplora.continual.{name}" for name in CONTINUAL]
    assert {name for name in edges if name.startswith("jumplora.continual.")} == set(modules)
    offenders = [f"{name} imports {target}" for i, name in enumerate(modules) for target in sorted(edges[name])
                 if target.startswith("jumplora.continual") and target not in modules[:i]]
    assert offenders == []



def fresh(code: str) -> str:
    """What `code` prints in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# the light layers: what a configuration, its options and the method registry are, reading results, the parsers
LIGHT = ("jumplora.config", "jumplora.options", "jumplora.kinds", "jumplora.methods.registry", "jumplora.results",
         "jumplora.cli")


@pytest.mark.parametrize("module", LIGHT)
def test_the_light_layers_load_no_torch(module):
    assert fresh(f"import sys, {module}; print('torch' in sys.modules, 'scipy' in sys.modules)").split() == \
        ["False", "False"]  # torch is ~1,200 modules and 5 s, loaded by what trains; scipy by what computes intervals


# an ELLA configuration, and its digest as the code before the registry's split gave it (the registry imported)
ELLA = ("from jumplora.config import RunConfig\n"
        "config = RunConfig.of({'method': 'ella', 'ella_delta': 'interpolated', 'rank': 4})\n"
        "print(config.digest(), type(config.settings).__name__)")
MISSPELT = ("from jumplora.config import RunConfig\nfrom jumplora.errors import JumpLoRAError\ntry:\n"
            "    RunConfig.of({'method': 'ella', 'ella_detla': 'sparse'})\n"
            "except JumpLoRAError as error:\n    print(error)")


@pytest.mark.parametrize("before", ["", "import jumplora.methods, jumplora.adapters, jumplora.methods.ella\n"])
def test_a_configuration_is_the_same_whatever_was_imported_before_it(before):
    assert fresh(before + ELLA).split() == ["28ba8ea553c5e166", "EllaSettings"]
    assert fresh(before + MISSPELT).strip() == "--ella-detla is not a setting of any method: leave it out"



# what a fresh interpreter has loaded, transitively (`-X importtime` lists every module it imports, as it imports it)
MODEL_CODE = ("torch", "transformers", "peft", "jumplora.adapters")


def loaded(argv: list[str], cwd: Path = REPO) -> set[str]:
    """The modules a fresh `python -X importtime *argv` imported (run from `cwd`, as a user runs it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def model_code(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == top or m.startswith(f"{top}.") for top in MODEL_CODE))


def test_the_probe_sees_what_an_import_loads_transitively():
    assert {"jumplora.adapters.lora", "torch"} <= loaded(["-c", "import jumplora.analysis"])


@pytest.mark.parametrize("argv", [[str(REPO / "ray_jobs" / "grid_lambda.py"), "--help"],
                                  ["-m", "jumplora", "--help"],
                                  ["-c", "import ray_jobs.grid"]], ids=["grid_lambda-help", "jumplora-help", "grid"])
def test_the_entry_points_help_and_the_grid_driver_load_no_model_code(argv, tmp_path):
    modules = loaded(argv, cwd=tmp_path)  # from outside the repository, as a user runs it
    assert model_code(modules) == []
    if "--help" in argv:
        assert "ray" not in modules  # nor Ray: its options are all --help reads


HANDED = """
import sys, types
from ray import tune
tune.with_parameters = lambda function, **parameters: function  # what Tune is handed, no Ray started
tune.with_resources = lambda function, resources: function
from ray_jobs import grid, trials
from ray_jobs.cluster import WorkerRequest
handed = [trials.trainable(WorkerRequest(workers=n), types.SimpleNamespace(uri="s3://b/g"), {}, None) for n in (1, 2)]
print(*(f"{function.__module__}.{function.__name__}" for function in handed), "torch" in sys.modules)
"""


def test_the_driver_hands_tune_its_trials_without_loading_torch(tmp_path):
    """The trainables a grid's driver gives Tune (one process, a TorchTrainer) import the worker, and with it torch,
    in the trial's process only."""
    assert fresh(HANDED).split() == ["ray_jobs.trials.tune_trial", "ray_jobs.trials.torch_trial", "False"]


def test_a_dry_run_builds_no_model_and_loads_no_torch(tmp_path, tiny_cache):
    """A dry run of the synthetic benchmark's smoke grid, its tiny preset cached: no torch, adapter, loop or model
    class (its source tokens counted from the preset's `tokenizer.json`, `TokenizerFile`)."""
    pytest.importorskip("ray")
    modules = loaded([str(REPO / "ray_jobs" / "grid_lambda.py"), "--order", "1", "--preset", "smoke", "--max-tasks",
                      "2", "--dry-run", "--gpus-per-worker", "0", "--cache-dir", str(tiny_cache),
                      "--storage-path", str(tmp_path / "storage")], cwd=tmp_path)
    assert [m for m in model_code(modules) if not m.startswith("transformers")] == []
    assert [m for m in modules if m.startswith(("jumplora.continual.loop", "jumplora.training", "jumplora.models",
                                                "transformers.modeling_utils", "transformers.configuration_utils",
                                                "ray_jobs.worker"))] == []


def ray_jobs_imports(root: Path) -> list[str]:
    """Every import statement under `root/jumplora` that names the `ray_jobs` package, wherever it stands (at the top,
    inside a function, under `if TYPE_CHECKING:`): the Ray jobs are built on the library, never the other way round."""
    found = []
    for path in sorted((root / "jumplora").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno} {name}" for name in names
                      if name.partition(".")[0] == "ray_jobs"]
    return found


def test_the_scan_finds_ray_jobs_imported_anywhere_in_a_module(tmp_path):
    (tmp_path / "jumplora").mkdir()
    (tmp_path / "jumplora" / "cli.py").write_text(
        "import ray_jobs_extra\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray_jobs.jobs as j\n"
        "def track():\n    from ray_jobs import track\n    from ray_jobs.storage import Storage\n")
    assert ray_jobs_imports(tmp_path) == ["jumplora/cli.py:4 ray_jobs.jobs", "jumplora/cli.py:6 ray_jobs",
                                          "jumplora/cli.py:7 ray_jobs.storage"]  # not ray_jobs_extra: another name


def test_the_library_imports_nothing_from_ray_jobs():
    assert ray_jobs_imports(REPO) == []
