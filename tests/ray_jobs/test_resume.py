"""The worker's choice of checkpoint to resume from, on Ray's `Checkpoint` objects (no Ray cluster needed)."""

import ray.train

from ray_jobs import worker

NAMES = ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]


def test_earlier_checkpoints_are_those_before_it_in_its_folder_newest_first(tmp_path):
    for name in [*NAMES, "other_dir"]:
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint_000001.tmp").write_text("")  # a file, not a checkpoint
    found = worker.earlier_checkpoints(ray.train.Checkpoint(str(tmp_path / NAMES[2])))
    assert [c.path for c in found] == [str(tmp_path / NAMES[1]), str(tmp_path / NAMES[0])]


def test_ray_train_timestamped_names_sort_in_time_order(tmp_path):
    names = ["checkpoint_2025-01-09_23-59-59.999999", "checkpoint_2025-01-10_00-00-00.000001"]
    for name in names:
        (tmp_path / name).mkdir()
    found = worker.earlier_checkpoints(ray.train.Checkpoint(str(tmp_path / names[1])))
    assert [c.path for c in found] == [str(tmp_path / names[0])]


def test_every_checkpoint_and_the_start_damaged_resumes_from_the_base_model_with_one_line(tmp_path, capsys):
    """Checkpoints without `checksums.json` (damaged) are refused before the workspace is touched."""
    for name in [*NAMES[:2], "start"]:
        (tmp_path / name).mkdir()
    latest, start = ray.train.Checkpoint(str(tmp_path / NAMES[1])), ray.train.Checkpoint(str(tmp_path / "start"))
    state = worker.resume(None, latest, start, warn=True)
    assert state.records == []
    tried = [tmp_path / NAMES[1], tmp_path / NAMES[0], tmp_path / "start"]
    assert capsys.readouterr().err == "warning: skipped damaged checkpoint(s) " + \
        "; ".join(f"{path} (checksums.json is missing)" for path in tried) + "; resuming from the base model\n"
