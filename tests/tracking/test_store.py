"""Where the store is: the default under the runs root, the environment, and a store inside a Ray job's temporary
working directory (warned)."""

import json
import os

from jumplora import tracking


def test_store_inside_a_ray_job_working_dir_is_warned(tmp_path, monkeypatch, capsys):
    workdir = tmp_path / "job"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.delenv(tracking.URI_ENV, raising=False)
    assert tracking.resolve_uri() == f"sqlite:///{workdir / 'runs' / 'mlflow.db'}"
    assert capsys.readouterr().err == ""  # not a job: no warning
    monkeypatch.setenv(tracking.RAY_JOB_ENV, json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip"}}))
    tracking.resolve_uri()
    assert "temporary working directory" in capsys.readouterr().err
    outside = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert tracking.resolve_uri(outside) == outside and capsys.readouterr().err == ""
    monkeypatch.setenv(tracking.URI_ENV, "http://127.0.0.1:5000")
    assert tracking.resolve_uri() == "http://127.0.0.1:5000"
    given = f"sqlite:///{tmp_path / 'y.db'}"  # sqlite:////tmp/...: an absolute path, whose folder exists
    assert tracking.resolve_uri(given) == given
    assert os.environ[tracking.URI_ENV] == "http://127.0.0.1:5000"
