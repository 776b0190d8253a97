"""Checkpoints: a good one restores bitwise; a damaged one (file missing, truncated, a flipped bit) is named and
refused, and resuming falls back to the newest intact candidate."""

import contextlib
import copy
import dataclasses
import hashlib
import json
import re
import shutil

import pytest
import torch

from jumplora import checkpoints
from jumplora.config import RunConfig
from jumplora.continual import prepare, run_continual
from jumplora.outputs import load_updates, save_updates

SAVED = {"task01.safetensors", "task02.safetensors", "memory.safetensors", "progress.json"}


@pytest.fixture(scope="module")
def trained(tiny_cache, tmp_path_factory):
    """Two tasks of order 1 (jumplora+ella, so W_past is saved too), a checkpoint after each."""
    config = RunConfig(order=1, max_tasks=2, max_train_per_task=65, max_eval_per_task=8, device="cpu")
    ws = prepare(config, tiny_cache, progress=False)
    base = copy.deepcopy(ws.model.state_dict())
    root = tmp_path_factory.mktemp("checkpoints")
    dirs = [root / "checkpoint_000000", root / "checkpoint_000001"]

    def save(ws, state, t):
        dirs[t].mkdir()
        checkpoints.save(dirs[t], ws, state)

    state = run_continual(ws, progress=False, on_task=save)
    final = copy.deepcopy(ws.model.state_dict())
    return ws, base, final, state, dirs


def base_model(trained):
    ws, base, *_ = trained
    ws.model.load_state_dict(base)
    return ws


def damaged_copy(source, target, name, damage):
    shutil.copytree(source, target)
    path = target / name
    data = bytearray(path.read_bytes())
    path.write_bytes(damage(data))
    return len(data)


def flip_middle_byte(data: bytearray) -> bytes:
    data[len(data) // 2] ^= 0x01
    return bytes(data)


def candidates(*dirs):
    return [(str(d), contextlib.nullcontext(d)) for d in dirs]


def test_a_good_checkpoint_verifies_and_restores_bitwise(trained):
    _, _, final, state, dirs = trained
    sums = json.loads((dirs[1] / checkpoints.CHECKSUMS).read_text())
    assert set(sums) == SAVED
    for name, entry in sums.items():
        data = (dirs[1] / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    assert checkpoints.find_damage(dirs[1]) is None
    ws = base_model(trained)
    restored = checkpoints.load(dirs[1], ws)
    assert all(torch.equal(ws.model.state_dict()[k], final[k]) for k in final)
    assert [r.test for r in restored.records] == [r.test for r in state.records]
    assert all(torch.equal(restored.memory[k], v) for k, v in state.memory.items())
    assert restored.runtime == state.runtime and restored.runtime["world_size"] == 1


@pytest.mark.parametrize("name", ["task02.safetensors", "progress.json"])
def test_a_truncated_file_is_named_and_refused(trained, tmp_path, name):
    _, base, _, _, dirs = trained
    size = damaged_copy(dirs[1], tmp_path / "c", name, lambda data: bytes(data[:100]))
    expected = f"{name} is truncated (100 of {size} bytes)"
    assert checkpoints.find_damage(tmp_path / "c") == expected
    ws = base_model(trained)
    with pytest.raises(checkpoints.DamagedCheckpointError, match=re.escape(expected)):
        checkpoints.load(tmp_path / "c", ws)
    assert all(torch.equal(ws.model.state_dict()[k], base[k]) for k in base)  # refused before any change


def test_a_flipped_bit_is_named_and_refused(trained, tmp_path):
    _, _, _, _, dirs = trained
    damaged_copy(dirs[1], tmp_path / "c", "task01.safetensors", flip_middle_byte)
    assert checkpoints.find_damage(tmp_path / "c") == \
        "task01.safetensors differs from what was saved (SHA-256 mismatch)"
    with pytest.raises(checkpoints.DamagedCheckpointError, match="task01.safetensors differs"):
        checkpoints.load(tmp_path / "c", base_model(trained))


@pytest.mark.parametrize("name", ["checksums.json", "memory.safetensors"])
def test_a_missing_file_is_named(trained, tmp_path, name):
    shutil.copytree(trained[4][1], tmp_path / "c")
    (tmp_path / "c" / name).unlink()
    assert checkpoints.find_damage(tmp_path / "c") == f"{name} is missing"


def test_resuming_falls_back_to_the_previous_good_checkpoint_with_one_warning(trained, tmp_path, capsys):
    _, _, _, state, dirs = trained
    latest = tmp_path / "checkpoint_000001"
    size = damaged_copy(dirs[1], latest, "task02.safetensors", lambda data: bytes(data[:-1]))
    restored = checkpoints.load_newest_intact(candidates(latest, dirs[0]), base_model(trained))
    assert [r.task for r in restored.records] == ["dbpedia"]
    assert restored.records[0].test == state.records[0].test
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"warning: skipped damaged checkpoint(s) {latest} (task02.safetensors is truncated "
                     f"({size - 1} of {size} bytes)); resuming from {dirs[0]}"]


def test_all_damaged_falls_back_to_the_start_then_to_the_base_model(trained, tmp_path, capsys):
    _, base, _, _, dirs = trained
    damaged = [tmp_path / "checkpoint_000001", tmp_path / "checkpoint_000000"]
    damaged_copy(dirs[1], damaged[0], "task01.safetensors", flip_middle_byte)
    damaged_copy(dirs[0], damaged[1], "progress.json", lambda data: bytes(data[:10]))
    start = dirs[0]
    restored = checkpoints.load_newest_intact(candidates(*damaged, start), base_model(trained))
    assert len(restored.records) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(f"resuming from {start}")
    ws = base_model(trained)
    fresh = checkpoints.load_newest_intact(candidates(*damaged), ws, warn=False)
    assert fresh.records == [] and fresh.runtime is None and capsys.readouterr().err == ""
    assert all(torch.equal(ws.model.state_dict()[k], base[k]) for k in base)


@pytest.mark.timeout(900)  # includes the build of the causal test preset on a fresh cache
@pytest.mark.parametrize("method", ["jumplora+ella", "ewc"])
def test_a_causal_run_restores_bitwise(causal_preset, tmp_path, method):
    """On the causal test preset: ELLA's W_past and the task updates, or EWC's Fisher and every weight (a model whose
    embeddings are tied to its output layer), restore the very weights and rows of the uninterrupted run."""
    config = RunConfig(order=1, model=str(causal_preset), method=method, max_tasks=2, max_train_per_task=65,
                       max_eval_per_task=8, device="cpu", lambdas=[0.0, 1e3, 1e3, 1e3])
    ws = prepare(config, causal_preset.parent, progress=False)
    base = copy.deepcopy(ws.model.state_dict())

    def save(ws, state, t):
        (tmp_path / f"c{t}").mkdir()
        checkpoints.save(tmp_path / f"c{t}", ws, state)

    state = run_continual(ws, progress=False, on_task=save)
    final = copy.deepcopy(ws.model.state_dict())
    assert any(not torch.equal(final[k], base[k]) for k in base)
    ws.model.load_state_dict(base)
    restored = checkpoints.load(tmp_path / "c1", ws)
    assert all(torch.equal(ws.model.state_dict()[k], final[k]) for k in final)
    assert [r.test for r in restored.records] == [r.test for r in state.records]
    assert restored.memory.keys() == state.memory.keys() and state.memory
    assert all(torch.equal(restored.memory[k], v) for k, v in state.memory.items())


def emptied_checksums(source, target, *removed):
    """A copy of the checkpoint `source` without the files `removed`, and whose checksums.json records nothing (as
    an editor or a cut-off sync could leave it)."""
    shutil.copytree(source, target)
    for name in removed:
        (target / name).unlink()
    (target / checkpoints.CHECKSUMS).write_text("{}")
    return target


@pytest.mark.parametrize("removed", ["progress.json", "memory.safetensors"])
def test_a_checkpoint_whose_record_misses_a_file_is_not_resumed(trained, tmp_path, capsys, removed):
    """Before: progress.json missing → FileNotFoundError; ELLA's W_past missing → resumed with a zero penalty."""
    _, base, _, state, dirs = trained
    damaged = emptied_checksums(dirs[1], tmp_path / "c", removed)
    with pytest.raises(checkpoints.DamagedCheckpointError, match="checksums.json does not record progress.json"):
        checkpoints.load(damaged, base_model(trained))
    restored = checkpoints.load_newest_intact(candidates(damaged, dirs[0]), base_model(trained))
    assert [r.task for r in restored.records] == ["dbpedia"] and restored.memory.keys() == state.memory.keys()
    assert capsys.readouterr().err.splitlines() == [
        f"warning: skipped damaged checkpoint(s) {damaged} (checksums.json does not record progress.json); "
        f"resuming from {dirs[0]}"]


def test_a_file_left_out_of_both_records_is_named(trained, tmp_path):
    """W_past deleted and its entry too: progress.json (intact) still lists it."""
    damaged = tmp_path / "c"
    shutil.copytree(trained[4][1], damaged)
    (damaged / "memory.safetensors").unlink()
    sums = json.loads((damaged / checkpoints.CHECKSUMS).read_text())
    del sums["memory.safetensors"]
    (damaged / checkpoints.CHECKSUMS).write_text(json.dumps(sums))
    with pytest.raises(checkpoints.DamagedCheckpointError, match="checksums.json does not record memory.safetensors"):
        checkpoints.load(damaged, base_model(trained))


def test_resuming_on_other_data_or_settings_names_what_changed(trained):
    ws, *_, dirs = trained
    other_data = dataclasses.replace(ws, benchmark=dataclasses.replace(ws.benchmark, fingerprint="0" * 64))
    with pytest.raises(checkpoints.ConfigMismatchError, match=re.escape(
            f"trained on other data: the splits read from the synthetic benchmark changed since (fingerprint "
            f"{ws.benchmark.fingerprint[:12]}, now 000000000000)")):
        checkpoints.load(dirs[1], other_data)
    other_seed = dataclasses.replace(ws, config=dataclasses.replace(ws.config, seed=7))
    with pytest.raises(checkpoints.ConfigMismatchError, match="written with other settings: --seed 42, now 7$"):
        checkpoints.load(dirs[1], other_seed)


def test_an_update_with_negative_zeros_round_trips_bitwise(tmp_path):
    """A sparse update's −0.0 (a masked negative product) comes back as −0.0, so a resumed run sums the same bytes."""
    update = torch.tensor([[0.0, -0.0, 1.5, 0.0], [-0.0, 0.0, 0.0, -2.0]])
    save_updates(tmp_path / "u.safetensors", {"w": update})
    back = load_updates(tmp_path / "u.safetensors")["w"]
    assert torch.equal(back.view(torch.int32), update.view(torch.int32))
    assert torch.equal((back + update).view(torch.int32), (update + update).view(torch.int32))
