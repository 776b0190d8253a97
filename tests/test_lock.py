"""One writer per output directory (`jumplora.lock`): a held lock refuses with one line naming its holder, a lock of a
dead process of this host (or of an earlier boot) is taken over with a warning, one of another host is refused with
the file to delete, and a lock is released only by its holder."""

import json
import socket
import subprocess
import sys

import pytest

from jumplora import lock
from jumplora.lock import DirectoryLock, Holder, LockedError, lock_path


def write_lock(folder, **changes):
    """A lock of `folder` as another process would have left it."""
    holder = Holder.this_process("jumplora run")
    data = {**json.loads(holder.to_text()), **changes}
    lock_path(folder).write_text(json.dumps(data))
    return Holder(**data)


def dead_pid() -> int:
    """The pid of a process that has exited (reaped, so nothing runs under it now)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_lock_sits_beside_the_directory_and_goes_with_its_holder(tmp_path):
    folder = tmp_path / "run"
    with DirectoryLock(folder, "jumplora run", "pass another --out") as held:
        assert lock_path(folder) == tmp_path / ".run.lock" and not folder.exists()
        found = Holder.from_text(lock_path(folder).read_text())
        assert found == held.holder and (found.host, found.pid) == (socket.gethostname(), held.holder.pid)
    assert not lock_path(folder).exists()


def test_a_held_lock_refuses_with_one_line_naming_its_holder(tmp_path):
    folder = tmp_path / "run"
    holder = write_lock(folder)  # this test's own process: it runs
    with pytest.raises(LockedError) as refused, DirectoryLock(folder, "jumplora run", "pass another --out"):
        pass
    assert str(refused.value) == (f"{folder} is being written by `jumplora run` (pid {holder.pid} on "
                                  f"{holder.host}, since {holder.started}): wait until it ends, or pass another --out")
    assert Holder.from_text(lock_path(folder).read_text()) == holder  # left as it was


@pytest.mark.parametrize("gone", ["dead pid", "earlier boot"])
def test_a_lock_of_a_process_that_is_gone_is_taken_over_with_a_warning(gone, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "run"
    if gone == "dead pid":
        stale = write_lock(folder, pid=dead_pid())
    else:
        monkeypatch.setattr(lock, "boot_id", lambda: "this-boot")
        stale = write_lock(folder, boot="an-earlier-boot")  # its pid (this process) runs, but in another boot
    with DirectoryLock(folder, "jumplora run", "pass another --out") as held:
        assert Holder.from_text(lock_path(folder).read_text()) == held.holder != stale
    assert capsys.readouterr().err == (f"warning: taking over the lock of {folder} from {stale.describe()}, which is "
                                       "no longer running\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing left: no stale copy, no lock


def test_a_lock_of_another_host_is_refused_naming_the_file_to_delete(tmp_path):
    folder = tmp_path / "run"
    write_lock(folder, host="another-node", pid=dead_pid())  # a dead pid here says nothing about another host
    refused = f"on another host: if that run is gone, delete {lock_path(folder)}"
    with pytest.raises(LockedError, match=refused), DirectoryLock(folder, "grid_lambda.py", "pass another --name"):
        pass


def test_release_leaves_a_lock_taken_over_by_another_process(tmp_path):
    folder = tmp_path / "run"
    with DirectoryLock(folder, "jumplora run", "pass another --out"):
        other = write_lock(folder)  # as if another process had taken it over
    assert Holder.from_text(lock_path(folder).read_text()) == other


@pytest.mark.parametrize("kind", ["empty", "{}", "no pid", "a folder", "a dangling link", "binary"])
def test_a_lock_that_is_not_one_is_refused_in_one_line_and_left_as_it_is(kind, tmp_path, monkeypatch):
    """Read as data: a lock this code did not write cannot tell whether its writer runs, so it is neither trusted nor
    removed; the line names the file to delete."""
    monkeypatch.setattr(lock, "UNREADABLE_WAIT", 0.0)
    folder = tmp_path / "run"
    path = lock_path(folder)
    if kind == "a folder":
        path.mkdir()
    elif kind == "a dangling link":
        path.symlink_to(tmp_path / "gone")
    else:
        path.write_bytes({"empty": b"", "{}": b"{}", "binary": b"\xff\xfe\x00",
                          "no pid": json.dumps({"host": "h", "started": "s", "command": "c", "token": "t"}).encode()}
                         [kind])
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(LockedError) as refused, DirectoryLock(folder, "jumplora run", "pass another --out"):
        pass
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{folder}: its lock {path} is ")
    assert message.endswith("delete it if no run writes there")
    assert ("a link to a missing file" in message) == (kind == "a dangling link")
    assert path.is_symlink() == (kind == "a dangling link") and path.is_dir() == (kind == "a folder")
    assert (path.read_bytes() if path.is_file() else None) == before and not folder.exists()
