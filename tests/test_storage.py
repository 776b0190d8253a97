"""Storage on a local path and through a URI (file://, the code path of s3:// and gs://): no Ray needed."""

from __future__ import annotations

import json

import pytest
import torch

from jumplora.outputs import load_updates
from jumplora.results import RunResults
from jumplora.storage import Storage

RUN_FILES = ["accuracy_heatmap.png", "accuracy_matrix.csv", "bwt_radar.png", "overlap.png", "results.json",
             "sparsity_by_layer.png", "summary.txt", "updates.safetensors"]


@pytest.mark.parametrize("uri", [False, True])
def test_json_files_and_a_run_directory(tmp_path, uri):
    storage = Storage(f"file://{tmp_path}" if uri else str(tmp_path))
    assert storage.is_local is not uri
    folder = storage.child("grid")
    assert not folder.exists("manifest.json")
    folder.write_json("manifest.json", {"stages": [1]})
    assert folder.read_json("manifest.json") == {"stages": [1]} and folder.exists("manifest.json")
    updates = [{"q": torch.tensor([[0.0, 1.5], [0.0, 0.0]])}, {"q": torch.tensor([[0.5, 0.0], [0.0, 0.0]])}]
    sparsity = {"overall": 0.75, "per_layer": {"encoder.block.0": 0.75}}
    results = {"order": 1, "method": "ella", "seed": 42, "tasks": ["a", "b"], "accuracy_matrix": [[1.0, None],
               [0.5, 1.0]], "dev_accuracy_matrix": [[1.0, None], [1.0, 1.0]], "oa": 75.0, "bwt": -50.0,
               "fwt": None, "sparsity": [sparsity, sparsity],
               "jaccard": {"matrix": [[1.0, 0.0], [0.0, 1.0]], "middle_block": "encoder.block.0",
                           "mean_with_earlier_middle_block": [None, 0.0]}}
    folder.publish_run("run", RunResults.from_json(results), updates)
    run = tmp_path / "grid" / "run"
    assert json.loads((run / "results.json").read_text()) == RunResults.from_json(results).to_json()
    assert (run / "summary.txt").read_text().startswith("order 1 · ella · seed 42")
    assert (run / "accuracy_matrix.csv").read_text().splitlines()[2] == "test,b,0.5,1.0"
    assert sorted(p.name for p in run.iterdir()) == RUN_FILES  # all that `write_run` writes, CSV and plots too
    assert torch.equal(load_updates(run / "updates.safetensors")["q"], torch.tensor([[0.5, 1.5], [0.0, 0.0]]))
    assert not list(tmp_path.rglob(".*.tmp"))
