"""Storage on a local path and through a URI (file://, the code path of s3:// and gs://): no Ray needed."""

from __future__ import annotations

import json

import pytest
import torch

from jumplora.outputs import load_updates
from ray_jobs.storage import Storage


@pytest.mark.parametrize("uri", [False, True])
def test_json_files_and_a_run_directory(tmp_path, uri):
    storage = Storage(f"file://{tmp_path}" if uri else str(tmp_path))
    assert storage.is_local is not uri
    folder = storage.child("grid")
    assert not folder.exists("manifest.json")
    folder.write_json("manifest.json", {"stages": [1]})
    assert folder.read_json("manifest.json") == {"stages": [1]} and folder.exists("manifest.json")
    updates = [{"q": torch.tensor([[0.0, 1.5], [0.0, 0.0]])}, {"q": torch.tensor([[0.5, 0.0], [0.0, 0.0]])}]
    results = {"order": 1, "method": "ella", "seed": 42, "tasks": ["a"], "accuracy_matrix": [[1.0]], "oa": 100.0,
               "bwt": 0.0, "fwt": None, "sparsity": [{"overall": 0.5}]}
    folder.publish_run("run", results, updates)
    run = tmp_path / "grid" / "run"
    assert json.loads((run / "results.json").read_text()) == results
    assert (run / "summary.txt").read_text().startswith("order 1 · ella · seed 42")
    assert torch.equal(load_updates(run / "updates.safetensors")["q"], torch.tensor([[0.5, 1.5], [0.0, 0.0]]))
    assert not list(tmp_path.rglob(".*.tmp"))
