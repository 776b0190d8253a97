"""Methods from installed packages: the example plugins `examples/l2_plugin` (method `l2`) and `examples/l1_plugin`
(method `l1`, with a setting of its own, `--l1-eps`), found through their entry points. `l1` runs in `jumplora run`,
in `grid_lambda.py` and in a `reproduce.py` sweep beside a built-in method on Ray, and in `jumplora report`, with
nothing of `jumplora/` or `ray_jobs/` changed; its setting is an option of each command and is recorded under its
name; once uninstalled, its runs are still tracked and reported. Each command runs in its own process, as a user runs
it, so this session's registry stays the built-in one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from jumplora.adapters import LORA, CopyView, LoraAdapter
from jumplora.cli import main
from jumplora.methods import METHODS
from jumplora.tracking.store import experiment_name
from tests.conftest import adapter_settings
from tests.ray_jobs.conftest import SMOKE_ARGS

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "l2_plugin"
L1_PLUGIN = REPO / "examples" / "l1_plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has both plugins installed as `pip install -e examples/l2_plugin
    examples/l1_plugin` leaves them: their sources on the path, and each distribution's metadata there too (its entry
    points, from its pyproject.toml)."""
    site = tmp_path_factory.mktemp("site")
    for plugin in (PLUGIN, L1_PLUGIN):
        project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
        info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: "
                                       f"{project['version']}\n")
        points = "".join(f"{k} = {v}\n" for k, v in project["entry-points"]["jumplora.methods"].items())
        (info / "entry_points.txt").write_text(f"[jumplora.methods]\n{points}")
    path = [str(PLUGIN), str(L1_PLUGIN), str(site), str(REPO), os.environ.get("PYTHONPATH", "")]
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
    adapter = CopyView(LoraAdapter(t5, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), total_steps=3), 0)
    with torch.no_grad():
        for p in adapter.trainable_parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    penalty = L2().loss(adapter, step=1, lam=2.5)
    assert L2().loss(adapter, step=1, lam=0.0) is None
    penalty.backward()
    assert all(p.grad is not None for p in adapter.trainable_parameters())
    adapter.adapter.finish(), adapter.adapter.merge(0)
    changes = [(p.detach() - before[name]).square().sum() for name, p in t5.named_parameters()]
    torch.testing.assert_close(penalty.detach(), 2.5 * torch.stack(changes).sum(), rtol=1e-5, atol=0)


def test_the_l1_penalty_is_lambda_times_the_smoothed_l1_norm_of_the_change_the_merge_makes(t5, t5_batch):
    """λ Σ (√(c² + ε²) − ε) over every entry c of the change the merge makes; within ε per entry of λ Σ |c|; and at
    a fresh adapter (B = 0) zero, with a finite gradient (0)."""
    sys.path.insert(0, str(L1_PLUGIN))
    try:
        from jumplora_l1.method import L1
    finally:
        sys.path.remove(str(L1_PLUGIN))
    before = {name: p.detach().clone() for name, p in t5.named_parameters()}
    adapter = CopyView(LoraAdapter(t5, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), total_steps=3), 0)
    fresh = L1(eps=1e-3).loss(adapter, step=1, lam=2.0)  # B = 0: no change yet
    fresh.backward()
    assert abs(fresh.item()) < 1e-6 and all(p.grad.abs().max() == 0 for p in adapter.trainable_parameters())
    with torch.no_grad():
        for p in adapter.trainable_parameters():
            p.grad = None
            p.copy_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    eps = 1e-3
    penalty = L1(eps).loss(adapter, step=1, lam=2.0)
    assert L1(eps).loss(adapter, step=1, lam=0.0) is None
    adapter.adapter.finish(), adapter.adapter.merge(0)
    changes = torch.cat([(p.detach() - before[name]).reshape(-1) for name, p in t5.named_parameters()]).double()
    changes = changes[changes != 0]  # the adapted weights' entries
    expected = 2.0 * ((changes.square() + eps**2).sqrt() - eps).sum()
    torch.testing.assert_close(penalty.detach().double(), expected, rtol=1e-4, atol=0)
    assert 0 <= 2.0 * changes.abs().sum() - expected <= 2.0 * eps * changes.numel()


@pytest.mark.timeout(900)
def test_an_installed_plugin_with_a_setting_runs_in_every_command(installed, tiny_cache, tmp_path):
    """`--method l1` and its `--l1-eps` are offered by `jumplora run` and the Ray scripts; l1 trains (its penalty is
    0 at each task's first step, where B = 0, and positive after it where λ > 0), runs a λ grid and a sweep beside
    IncLoRA on Ray, each recording its ε under `l1`, and is reported."""
    for command in (["-m", "jumplora", "run"], ["ray_jobs/grid_lambda.py"]):
        shown = " ".join(run([*command, "--help"], installed).split())
        assert "--l1-eps L1_EPS L1: the ε of |x| ≈ √(x² + ε²) − ε in λ·Σ|β B A| (a finite gradient at 0); read by " \
               "l1 (default: 0.0001)" in shown, command
        assert re.search(r"--method \{inclora,[^}]*,mtl,(l2,l1|l1,l2)\}", shown), command
    caps = ["--max-tasks", "2", "--max-train-per-task", "96", "--max-eval-per-task", "16", "--model-dropout", "0"]
    out = tmp_path / "run"
    run(["-m", "jumplora", "run", "--method", "l1", "--order", "1", "--lambdas", "0,0.01,0.01,0.01", "--l1-eps",
         "0.001", *caps, "--cache-dir", str(tiny_cache), "--no-tracking", "--quiet", "--out", str(out)], installed)
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "l1" and results["lambdas"] == [0.0, 0.01]
    assert results["config"]["l1"] == {"l1_eps": 0.001} and "l1_eps" not in results["config"]
    first, second = results["loss_curves"]["penalty"]
    assert first == [0.0] * 3 and abs(second[0]) < 1e-6 and all(value > 1e-6 for value in second[1:])

    # a λ grid without --grid: its stages try the plugin's own grid (MethodSpec.lambda_grid), not SPEC §5's
    storage = tmp_path / "grid"
    run(["ray_jobs/grid_lambda.py", *SMOKE_ARGS, "--method", "l1", "--l1-eps", "0.001", "--order", "1", "--max-tasks",
         "2", "--cache-dir", str(tiny_cache), "--storage-path", str(storage), "--name", "l1"], installed)
    manifest = json.loads((storage / "l1" / "manifest.json").read_text())
    assert [sorted(trial["lam"] for trial in stage["trials"]) for stage in manifest["stages"][1:]] == [
        [0.0001, 0.001, 0.01]]
    grid_results = json.loads((storage / "l1" / "run" / "results.json").read_text())
    assert grid_results["method"] == "l1" and grid_results["lambdas"][1] in (0.0001, 0.001, 0.01)
    assert grid_results["config"]["l1"] == {"l1_eps": 0.001}

    # a sweep of a plugin beside a built-in: its λ under `--lambdas paper` is the plugin's own default_lambda
    run(["ray_jobs/reproduce.py", *SMOKE_ARGS, "--methods", "inclora,l1", "--orders", "1", "--seeds", "42",
         "--max-tasks", "2", "--cache-dir", str(tiny_cache), "--storage-path", str(storage), "--name", "sweep",
         "--no-tracking"], installed)
    swept = {name: json.loads((storage / "sweep" / "runs" / f"{name}-order1-seed42" / "run" / "results.json")
                              .read_text()) for name in ("inclora", "l1")}
    assert swept["l1"]["lambdas"] == [0.0, 1e-3] and swept["l1"]["config"]["l1"] == {"l1_eps": 1e-4}
    assert swept["inclora"]["lambdas"] == [0.0, 0.0] and "inclora" not in swept["inclora"]["config"]

    report = tmp_path / "report"
    run(["-m", "jumplora", "report", str(out), str(storage / "l1" / "run"), "--out", str(report)], installed)
    assert "| l1 " in (report / "report.md").read_text()

    # uninstalled, as in this process (its registry has no l1): a finished run is files, read without its method
    assert "l1" not in METHODS
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["track", str(out), "--tracking-uri", uri]) == 0
    assert main(["report", str(out), "--out", str(tmp_path / "report-after")]) == 0
    assert "| l1 " in (tmp_path / "report-after" / "report.md").read_text()
    client = MlflowClient(uri)
    logged = client.search_runs([client.get_experiment_by_name(experiment_name(1)).experiment_id])
    assert {("l1", "0.001")} <= {(run.data.params.get("config.method"), run.data.params.get("config.l1.l1_eps"))
                                 for run in logged}
