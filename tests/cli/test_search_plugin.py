"""A λ search from an installed package, in one file: its `SearchSpec` (found through the entry-point group
`jumplora.searches`) and its `Search`. `grid_lambda.py --help` offers it, with its own option, and a dry run plans a
grid with it beside the built-in searches, nothing of `ray_jobs/` changed. Each command runs in its own process, as a
user runs it, so this session's searches stay the built-in ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_jobs import grid_lambda
from ray_jobs.searches import searches

REPO = Path(__file__).resolve().parents[2]
PLUGIN = '''
from dataclasses import dataclass

from jumplora.kinds import POSITIVE_INT
from ray_jobs.search import Grid
from ray_jobs.searches import Option, SearchSpec


@dataclass(frozen=True)
class Again(Grid):
    """The grid under another name: every λ trains the whole task."""

    name = "again"
    title = "search again"

    def describe(self) -> str:
        return "a plugin's grid, every λ to the end"


SEARCH = SearchSpec("again", "a plugin's search, the grid again", "plugin_search:Again.from_args",
                    options=(Option("--again-rounds", POSITIVE_INT, "rounds (not read)"),))
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a process with the plugin installed: its module on the path beside its distribution's
    metadata, whose entry points name its SearchSpec."""
    site = tmp_path_factory.mktemp("site")
    (site / "plugin_search.py").write_text(PLUGIN)
    info = site / "plugin_search-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-search\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[jumplora.searches]\nagain = plugin_search:SEARCH\n")
    path = [str(site), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)), "RAY_ADDRESS": ""}


def grid_lambda_py(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "ray_jobs" / "grid_lambda.py"), *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_built_in_searches_are_declared_without_their_code():
    assert list(searches()) == ["grid", "halving"]
    help_text = grid_lambda.build_parser().format_help()
    assert "--search {grid,halving}" in help_text and "halving: rung fractions" in help_text


def test_a_plugin_search_is_offered_by_help_and_plans_a_grid(installed, tmp_path):
    done = grid_lambda_py(["--help"], installed, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    words = " ".join(done.stdout.split())
    assert "{grid,halving,again}" in words and "again: a plugin's search, the grid again" in words
    assert "--again-rounds" in done.stdout
    base = ["--order", "1", "--preset", "smoke", "--max-tasks", "2", "--dry-run", "--gpus-per-worker", "0",
            "--cache-dir", str(tmp_path / "cache"), "--storage-path", str(tmp_path / "storage")]
    refused = grid_lambda_py([*base, "--again-rounds", "2"], installed, tmp_path)
    assert refused.returncode == 2 and "--again-rounds set(s) the again search: add --search again" in refused.stderr
    done = grid_lambda_py([*base, "--search", "again", "--again-rounds", "2"], installed, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = done.stdout
    assert plan.startswith("λ search again of order 1 (dbpedia, amazon)")
    assert "  again: a plugin's grid, every λ to the end" in plan
    assert "  again: 24 optimizer steps (100 % of the grid's steps), worth 8.0 trainings" in plan
    assert "storage: " in plan and plan.rstrip().endswith("-smoke-seed42-again")
    assert not (tmp_path / "storage").exists()
