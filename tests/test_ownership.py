"""The one writer of a folder the product owns, `ownership.Target`, for every kind it writes (a run directory in place
and replaced, a saved model, a report, a built data folder): the record names each file with its SHA-256 as it is
written, never by listing the folder; a deletion or a replacement deletes only what the record names, unchanged; the
user's files (added while the command runs, a product file the user changed, an empty folder, a `.X.tmp` of theirs)
stay byte-identical and are named in one line; a record that names a path outside the folder, or a folder, deletes
nothing there. The commands' refusals of the same cases: tests/cli/test_ownership.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jumplora import ownership
from jumplora.errors import JumpLoRAError
from jumplora.ownership.checks import OVERWRITE, replaced_dir
from jumplora.ownership.folders import LocalFolder, read_owner

# (kind, command, option, overwrite, aside): how each writing option writes through its Target
WRITERS = {
    "run --out": (ownership.RUN, "jumplora run", "--out", False, False),
    "run --out --overwrite": (ownership.RUN, "jumplora run", "--out", True, False),
    "run --save-model": (ownership.MODEL, "jumplora run --save-model", "--save-model", True, True),
    "report --out": (ownership.REPORT, "jumplora report", "--out", True, True),
    "data build --out": (ownership.DATA, "jumplora data build", "--out", False, True),
}


def target(path: Path, how: str) -> ownership.Target:
    kind, command, option, overwrite, aside = WRITERS[how]
    return ownership.Target(path, kind, command, option, overwrite, aside)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(folder: Path) -> dict:
    return json.loads((folder / ownership.MARKER).read_text())


def tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("how", list(WRITERS))
def test_the_record_names_what_was_written_with_its_hash_and_nothing_the_user_added(how, tmp_path):
    """Each file as it was put in place (its SHA-256 computed here from the bytes written), the folders the product
    made, no aside name left; a file the user put there meanwhile is not recorded."""
    out = tmp_path / "out"
    with target(out, how) as written:
        ownership.write_text(written.path / "a.txt", "alpha\n")
        with ownership.written(written.path / "sub" / "b.bin") as tmp:
            tmp.write_bytes(b"\x00\x01")
        (written.path / "notes.txt").write_text("the user's\n")  # while the command runs
        with written.tree("ckpt/after_task01") as folder:
            (folder / "w.safetensors").write_bytes(b"weights")
    found = record(out)
    assert found["kind"] == WRITERS[how][0].name and found["command"] == WRITERS[how][1]
    assert found["record"] == {"a.txt": sha(b"alpha\n"), "sub/b.bin": sha(b"\x00\x01"),
                               "ckpt/after_task01/w.safetensors": sha(b"weights")}
    assert sorted(found["dirs"]) == ["ckpt", "ckpt/after_task01", "sub"] and found["aside"] == []
    assert (out / "notes.txt").read_text() == "the user's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside


@pytest.mark.parametrize("how", list(WRITERS))
def test_a_removal_deletes_only_the_recorded_and_unchanged_and_names_the_rest(how, tmp_path, capsys):
    """`remove` (a run's old checkpoints, its checkpoints at the end) of a folder holding a file the user added
    between two tasks, an empty folder of theirs, a `.X.tmp` of theirs and a product file they edited: those stay
    byte-identical, named in one line; the rest of the product's is gone."""
    out = tmp_path / "out"
    with target(out, how) as written:
        for name in ("ckpt/a.bin", "ckpt/b.bin", "ckpt/deep/c.bin"):
            ownership.write_text(written.path / name, name)
        mine = {"ckpt/notes.txt": b"between two tasks\n", "ckpt/.backup.tmp/key.txt": b"secret\n",
                "ckpt/b.bin": b"edited by the user\n"}
        for name, data in mine.items():
            (written.path / name).parent.mkdir(parents=True, exist_ok=True)
            (written.path / name).write_bytes(data)
        (written.path / "ckpt" / "empty").mkdir()
        kept = written.remove("ckpt")
    assert sorted(kept) == ["ckpt/.backup.tmp/key.txt", "ckpt/b.bin", "ckpt/empty/", "ckpt/notes.txt"]
    assert {k: v for k, v in tree(out / "ckpt").items() if v is not None} == {k[5:]: v for k, v in mine.items()}
    assert (out / "ckpt" / "empty").is_dir() and not (out / "ckpt" / "deep").exists()
    assert record(out)["record"] == {"ckpt/b.bin": sha(b"ckpt/b.bin")}  # still the product's, changed
    assert capsys.readouterr().err == (f"warning: {out} keeps ckpt/.backup.tmp/key.txt, ckpt/b.bin, ckpt/empty/ "
                                       "(and 1 more), which jumplora did not write or which changed since it wrote "
                                       "them: it deleted only its own files\n")
    line = refusal_of(out, how, overwrite=True)
    assert "ckpt/.backup.tmp/key.txt, ckpt/empty/, ckpt/notes.txt, which jumplora did not write; ckpt/b.bin changed " \
           "since jumplora wrote it" in line and OVERWRITE not in line


def refusal_of(out: Path, how: str, overwrite: bool) -> str:
    kind, _, option, _, _ = WRITERS[how]
    with pytest.raises(JumpLoRAError) as refused:
        ownership.check_target(out, kind, option, overwrite)
    return str(refused.value)


@pytest.mark.parametrize("how", [how for how in WRITERS if WRITERS[how][3]])
def test_a_replacement_keeps_what_the_user_added_or_changed_meanwhile_in_the_old_folder(how, tmp_path, capsys):
    """`--overwrite` over a folder the product wrote: the new one is put in place once complete; of the old one,
    what the record names unchanged is deleted, the rest stays byte-identical beside, named in one line."""
    out = tmp_path / "out"
    with target(out, how) as written:
        ownership.write_text(written.path / "old.txt", "old\n")
        ownership.write_text(written.path / "kept.txt", "old\n")
    with target(out, how) as written:
        assert written.path != out  # written aside
        ownership.write_text(written.path / "new.txt", "new\n")
        (out / "late.txt").write_text("the user's\n")
        (out / "kept.txt").write_text("edited\n")
    assert tree(out) == {ownership.MARKER: (out / ownership.MARKER).read_bytes(), "new.txt": b"new\n"}
    replaced = replaced_dir(out)
    assert {k: v for k, v in tree(replaced).items() if k != ownership.MARKER} == {"kept.txt": b"edited\n",
                                                                               "late.txt": b"the user's\n"}
    assert capsys.readouterr().err.startswith(f"warning: {replaced} keeps kept.txt, late.txt, which jumplora did not "
                                              "write or which changed since it wrote them")


@pytest.mark.parametrize("how", list(WRITERS))
def test_a_failed_block_leaves_the_folder_as_it_was(how, tmp_path):
    """A write cut off leaves no aside file and no aside name in the record; a replacement cut off leaves the old
    folder and nothing beside it."""
    out = tmp_path / "out"
    with target(out, how) as written:
        ownership.write_text(written.path / "a.txt", "alpha\n")
    before = tree(out)
    with pytest.raises(RuntimeError), target(out, how) as written, ownership.written(written.path / "b.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("cut off")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert {k: v for k, v in tree(out).items() if k != ownership.MARKER} == \
        {k: v for k, v in before.items() if k != ownership.MARKER}
    assert record(out)["aside"] == []


def test_what_a_cut_off_write_left_under_a_recorded_aside_name_is_cleared_and_a_users_tmp_is_not(tmp_path):
    out = tmp_path / "out"
    with target(out, "run --out") as written:
        ownership.write_text(written.path / "a.txt", "alpha\n")
    found = record(out)
    found["aside"] = [".a.txt.0123abcd.tmp"]  # named before a write that was then killed
    (out / ".a.txt.0123abcd.tmp").write_text("half")
    (out / ".a.txt.tmp").write_text("the user's\n")  # what a product once took for its own by the name
    (out / ownership.MARKER).write_text(json.dumps(found))
    with target(out, "run --out"):
        pass
    assert not (out / ".a.txt.0123abcd.tmp").exists() and (out / ".a.txt.tmp").read_text() == "the user's\n"


@pytest.mark.parametrize("named", ["../x", "/ABSOLUTE", "sub/../../x", "notes"])
def test_a_record_naming_a_path_outside_or_a_folder_deletes_nothing_there(named, tmp_path):
    """A record edited to name a path outside the folder is no record (the folder is not the product's: nothing in it
    is deleted); one naming a folder of the user's deletes nothing in it (a folder has no content hash)."""
    out, outside = tmp_path / "out", tmp_path / "x"
    outside.write_text("the user's, beside\n")
    with target(out, "run --out") as written:
        ownership.write_text(written.path / "a.txt", "alpha\n")
    (out / "notes").mkdir()
    (out / "notes" / "todo.txt").write_text("cite the paper\n")
    found = record(out)
    found["record"][str(outside) if named == "/ABSOLUTE" else named] = sha(outside.read_bytes())
    (out / ownership.MARKER).write_text(json.dumps(found))
    before = {**tree(tmp_path)}
    if named != "notes":
        assert read_owner(LocalFolder(out)) is None
    with pytest.raises(JumpLoRAError, match="jumplora did not write"):
        ownership.check_target(out, ownership.RUN, "--out", overwrite=True)
    from jumplora.ownership.target import clear

    clear(out)
    after = tree(tmp_path)
    assert after["x"] == before["x"] and after["out/notes/todo.txt"] == b"cite the paper\n"
    assert ("out/a.txt" in after) == (named != "notes")  # a valid record still deletes its own unchanged files
