"""A method from an installed package: the example plugin `examples/l2_plugin` (method `l2`), found through its
entry point, runs in `jumplora run`, in `grid_lambda.py` on Ray, and in `jumplora report`, with nothing of
`jumplora/` or `ray_jobs/` changed; once uninstalled, its runs are still tracked and reported. Each command runs in
its own process, as a user runs it, so this session's registry stays the built-in one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from jumplora.adapters import LORA, PeftLoraAdapter
from jumplora.cli import main
from jumplora.methods import METHODS
from jumplora.tracking.store import experiment_name
from tests.conftest import adapter_settings
from tests.ray.conftest import SMOKE_ARGS

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "l2_plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has the plugin installed as `pip install -e examples/l2_plugin` leaves it:
    its source on the path, and its distribution's metadata there too (its entry points, from its pyproject.toml)."""
    site = tmp_path_factory.mktemp("site")
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = project["entry-points"]["jumplora.methods"]
    (info / "entry_points.txt").write_text("[jumplora.methods]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    path = [str(PLUGIN), str(site), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)), "RAY_ADDRESS": ""}


def run(argv: list[str], env: dict[str, str], timeout: int = 300) -> str:
    done = subprocess.run([sys.executable, *argv], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_l2_penalty_is_lambda_times_the_squared_change_the_merge_makes(t5, t5_batch):
    sys.path.insert(0, str(PLUGIN))  # the method module alone: importing it registers nothing
    try:
        from jumplora_l2.method import L2
    finally:
        sys.path.remove(str(PLUGIN))
    before = {name: p.detach().clone() for name, p in t5.named_parameters()}
    adapter = PeftLoraAdapter(t5, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), total_steps=3)
    with torch.no_grad():
        for p in adapter.trainable_parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    penalty = L2().loss(adapter, step=1, lam=2.5)
    assert L2().loss(adapter, step=1, lam=0.0) is None
    penalty.backward()
    assert all(p.grad is not None for p in adapter.trainable_parameters())
    adapter.merge()
    changes = [(p.detach() - before[name]).square().sum() for name, p in t5.named_parameters()]
    torch.testing.assert_close(penalty.detach(), 2.5 * torch.stack(changes).sum(), rtol=1e-5, atol=0)


@pytest.mark.timeout(600)
def test_an_installed_plugin_runs_in_every_command(installed, tiny_cache, tmp_path):
    """`--method l2` is offered, trains (its penalty is 0 at each task's first step, where B = 0, and positive after
    it where λ > 0), runs a λ grid on Ray, and is reported."""
    caps = ["--max-tasks", "2", "--max-train-per-task", "96", "--max-eval-per-task", "16", "--model-dropout", "0"]
    out = tmp_path / "run"
    run(["-m", "jumplora", "run", "--method", "l2", "--order", "1", "--lambdas", "0,100,100,100", *caps,
         "--cache-dir", str(tiny_cache), "--no-tracking", "--quiet", "--out", str(out)], installed)
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "l2" and results["lambdas"] == [0.0, 100.0]
    first, second = results["loss_curves"]["penalty"]
    assert first == [0.0] * 3 and second[0] == 0.0 and all(value > 0 for value in second[1:])

    storage = tmp_path / "grid"
    run(["ray_jobs/grid_lambda.py", *SMOKE_ARGS, "--method", "l2", "--order", "1", "--max-tasks", "2", "--grid",
         "1,100", "--cache-dir", str(tiny_cache), "--storage-path", str(storage), "--name", "l2"], installed)
    manifest = json.loads((storage / "l2" / "manifest.json").read_text())
    assert [sorted(trial["lam"] for trial in stage["trials"]) for stage in manifest["stages"][1:]] == [[1.0, 100.0]]
    grid_results = json.loads((storage / "l2" / "run" / "results.json").read_text())
    assert grid_results["method"] == "l2" and grid_results["lambdas"][1] in (1.0, 100.0)

    report = tmp_path / "report"
    run(["-m", "jumplora", "report", str(out), str(storage / "l2" / "run"), "--out", str(report)], installed)
    table = (report / "report.md").read_text()
    assert "| l2 " in table

    # uninstalled, as in this process (its registry has no l2): a finished run is files, read without its method
    assert "l2" not in METHODS
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["track", str(out), "--tracking-uri", uri]) == 0
    assert main(["report", str(out), "--out", str(tmp_path / "report-after")]) == 0
    assert "| l2 " in (tmp_path / "report-after" / "report.md").read_text()
    client = MlflowClient(uri)
    logged = client.search_runs([client.get_experiment_by_name(experiment_name(1)).experiment_id])
    assert "l2" in {run.data.params.get("config.method") for run in logged}
