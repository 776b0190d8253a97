"""An exception that no check expected ends every entry point in one line naming it, where it was raised and the file
holding its traceback, with exit code 3 (bad input keeps 2); JUMPLORA_DEBUG=1 prints the traceback as well. A method
plugin that does not load is one warning line, and the commands that do not need it work."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jumplora import cli
from jumplora.config import RunConfig
from jumplora.continual import single_task_config
from jumplora.errors import EXIT_BUG
from jumplora.methods import METHODS, check, get_method
from ray_jobs import cli as ray_cli

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(?P<command>.+): internal error: RuntimeError: lost a tensor at test_unexpected\.py:\d+ "
                  r"\(broken\); the traceback is in (?P<log>\S+\.txt) \(JUMPLORA_DEBUG=1 prints it\): please "
                  r"report it$")


def broken(*_):
    raise RuntimeError("lost a tensor\nsecond line")


@pytest.mark.parametrize("debug", ["", "1"])
def test_a_jumplora_command_that_fails_unexpectedly(debug, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("JUMPLORA_DEBUG", debug)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setitem(cli.COMMANDS, "orders", broken)
    assert cli.main(["orders"]) == EXIT_BUG == 3
    err = capsys.readouterr().err.splitlines()
    found = LINE.match(err[-1])
    assert found and found["command"] == "jumplora orders", err
    log = Path(found["log"])
    assert log.parent == tmp_path / "jumplora-tracebacks" and "Traceback" in log.read_text()
    assert "RuntimeError: lost a tensor" in log.read_text()
    assert (len(err) == 1) == (not debug) and (err[0] == "Traceback (most recent call last):") == bool(debug)


def test_a_ray_script_that_fails_unexpectedly(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(sys, "argv", ["ray_jobs/grid_lambda.py"])
    assert ray_cli.run_main(broken, []) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and LINE.match(err[0])["command"] == "grid_lambda.py"


def installed_entry_point(monkeypatch, name: str, value: str) -> None:
    """The registry, for the test, as if a package installed the entry point `name = value` (and no other), not
    loaded yet."""
    entry = importlib.metadata.EntryPoint(name, value, "jumplora.methods")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.setattr(METHODS, "specs", dict(METHODS.specs))
    monkeypatch.setattr(METHODS, "broken", {})
    monkeypatch.setattr(METHODS, "plugins_loaded", False)


@pytest.fixture
def a_broken_plugin(monkeypatch):
    """The registry as if a package installed the entry point `broken = no_such_module:SPEC`."""
    installed_entry_point(monkeypatch, "broken", "no_such_module_of_jumplora:SPEC")


WARNING = ("warning: the method plugin 'broken' (no_such_module_of_jumplora:SPEC) does not load "
           "(ModuleNotFoundError: No module named 'no_such_module_of_jumplora'): fix or uninstall its package; its "
           "method is not offered")


def test_a_plugin_that_does_not_load_is_one_line_and_the_other_commands_work(a_broken_plugin, capsys):
    assert cli.main(["orders"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [WARNING] and captured.out.startswith("1: dbpedia")
    assert cli.main(["run", "--help"]) == 0 and "--method" in capsys.readouterr().out
    assert "broken" not in METHODS and "inclora" in METHODS
    with pytest.raises(Exception, match=r"^the method plugin 'broken' \(no_such_module_of_jumplora:SPEC\) does not "):
        get_method("broken")


def test_a_plugin_naming_no_method_spec_is_one_line(monkeypatch, capsys):
    installed_entry_point(monkeypatch, "odd", "math:pi")
    assert "odd" not in METHODS
    assert capsys.readouterr().err.splitlines() == [
        "warning: the method plugin 'odd' (math:pi) does not load (JumpLoRAError: it must name a MethodSpec called "
        "'odd', got 3.141592653589793): fix or uninstall its package; its method is not offered"]


OPTION_NEEDED = ("must each be declared with jumplora.config.option(default, help, kind=...) under a name RunConfig "
                 "does not have")
# a plugin module's settings class → why its spec is refused (after "method 'l1': ")
MALFORMED = [
    ("l1_plain", "class Settings:\n    l1_eps = 0.1\n",
     "its settings must be a dataclass, got <class 'l1_plain.Settings'>"),
    ("l1_field", "@dataclass\nclass Settings:\n    l1_eps: float = 0.1\n", f"its settings ['l1_eps'] {OPTION_NEEDED}"),
    ("l1_shared", "@dataclass\nclass Settings:\n    lr: float = option(0.1, 'the L1 rate', kind=POSITIVE)\n",
     f"its settings ['lr'] {OPTION_NEEDED}"),
    ("l1_taken", "@dataclass\nclass Settings:\n    ewc_fisher_samples: int = option(8, 'samples', kind=POSITIVE)\n",
     "its settings ['ewc_fisher_samples'] are already ewc's options: name them after the method"),
    ("l1_default", "@dataclass\nclass Settings:\n    l1_eps: float = option(-1.0, 'smoothing', kind=POSITIVE)\n",
     "its default --l1-eps must be a number > 0, got -1.0"),
]


@pytest.mark.parametrize(("module", "settings", "why"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_plugin_with_malformed_settings_is_one_line_and_every_method_runs_with_its_a0(module, settings, why,
                                                                                         monkeypatch, capsys,
                                                                                         tmp_path):
    """Before: `MethodSpec(fields=("l1_eps",))` registered, then every method's a0 configuration raised
    AttributeError ('RunConfig' object has no attribute 'l1_eps')."""
    (tmp_path / f"{module}.py").write_text(
        "from dataclasses import dataclass\nfrom jumplora.adapters import LORA\nfrom jumplora.config import option\n"
        "from jumplora.kinds import POSITIVE\nfrom jumplora.methods import MethodSpec\n" + settings +
        "SPEC = MethodSpec('l1', adapter=LORA, per_task_lambda=True, settings=Settings)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed_entry_point(monkeypatch, "l1", f"{module}:SPEC")
    assert "l1" not in METHODS and "ewc" in METHODS
    assert capsys.readouterr().err.splitlines() == [
        f"warning: the method plugin 'l1' ({module}:SPEC) does not load (JumpLoRAError: method 'l1': "
        f"{why}): fix or uninstall its package; its method is not offered"]
    for method in ("inclora", "jumplora+ella", "ewc"):
        config = RunConfig(method=method)
        assert check(config) is METHODS[method]
        a0 = single_task_config(config)
        assert a0.method in ("inclora", "jumplora+inclora", "seqft") and a0.settings is None


@pytest.mark.timeout(120)
def test_python_m_jumplora_reports_a_bug_in_one_line(tmp_path):
    """The module entry, with a bug planted by a `sitecustomize` on the path: exit 3, one line, no traceback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import jumplora.cli\n"
        "def broken(args):\n    raise KeyError('planted')\n"
        "jumplora.cli.COMMANDS['orders'] = broken\n")
    env = {"PYTHONPATH": f"{site}:{REPO}", "TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "jumplora", "orders"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=110)
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("jumplora orders: internal error: KeyError: 'planted' at ")
