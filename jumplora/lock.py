"""One writer per output directory: `DirectoryLock`, an exclusive lock file `.<name>.lock` beside it that holds its
`Holder` (a storage URI, the Ray jobs': `jumplora.storage.Lease`, from the same records). The rules and why:
docs/DECISIONS.md, "One writer per output directory" and "Object stores: a lease"."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from jumplora.errors import JumpLoRAError

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # Linux: changes at every boot, so pids of an earlier boot are gone
ATTEMPTS = 5  # create / take over rounds before giving up (each loses only to another process that got the lock)
UNREADABLE_WAIT = 0.2  # seconds: a lock just created may not hold its text yet


class LockedError(JumpLoRAError):
    """The directory is written by another process."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: the process, its machine, when it started and what it runs."""

    host: str
    pid: int
    started: str  # ISO 8601, UTC
    command: str
    token: str  # identifies this holding: a lock is released or taken over only when its token is the one read
    boot: str | None = None
    expires: float | None = None  # leases only (`jumplora.storage.Lease`): Unix time after which it is stale

    @classmethod
    def this_process(cls, command: str, expires: float | None = None) -> Holder:
        return cls(socket.gethostname(), os.getpid(), datetime.now(UTC).isoformat(timespec="seconds"),
                   command, uuid.uuid4().hex, boot_id(), expires)

    @classmethod
    def from_text(cls, text: str) -> Holder | None:
        """The holder written in a lock, or None when the text is not one (empty, cut, `{}`, foreign): it must name
        the host, process, start, command and token it was written with."""
        try:
            data = json.loads(text)
            holder = cls(**{key: data.get(key) for key in cls.__dataclass_fields__})
        except (ValueError, TypeError, AttributeError):
            return None
        named = all(isinstance(getattr(holder, key), str) and getattr(holder, key)
                    for key in ("host", "started", "command", "token"))
        return holder if named and type(holder.pid) is int else None

    def to_text(self) -> str:
        return json.dumps(asdict(self))

    def describe(self) -> str:
        return f"`{self.command}` (pid {self.pid} on {self.host}, since {self.started})"

    def on_this_host(self) -> bool:
        return self.host == socket.gethostname()

    def is_gone(self) -> bool | None:
        """True when the holding process no longer runs, False when it does, None when this host cannot tell (it ran
        on another host)."""
        if not self.on_this_host():
            return None
        here = boot_id()
        if self.boot and here and self.boot != here:
            return True  # the machine rebooted since the lock was taken
        try:
            os.kill(int(self.pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process: it runs
            return False
        except (OSError, TypeError, ValueError):
            return None
        return False


def boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def lock_path(folder: Path) -> Path:
    """The lock of `folder`: the hidden file `.<name>.lock` beside it."""
    folder = Path(os.path.abspath(folder))
    return folder.parent / f".{folder.name}.lock"


def refusal(folder: str, holder: Holder, hint: str, lock: str) -> LockedError:
    """The one line a second writer gets."""
    other_host = "" if holder.on_this_host() else f" (on another host: if that run is gone, delete {lock})"
    return LockedError(f"{folder} is being written by {holder.describe()}{other_host}: wait until it ends, or {hint}")


def warn_take_over(folder: str, holder: Holder, why: str) -> None:
    print(f"warning: taking over the lock of {folder} from {holder.describe()}, {why}", file=sys.stderr)


class DirectoryLock:
    """`with DirectoryLock(folder, command, hint):` holds `lock_path(folder)` for the block; `hint` completes the
    refusal ("pass another --out")."""

    def __init__(self, folder: Path, command: str, hint: str) -> None:
        self.folder, self.command, self.hint = Path(folder), command, hint
        self.path = lock_path(self.folder)
        self.holder: Holder | None = None

    def __enter__(self) -> DirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mine = Holder.this_process(self.command)
        for _ in range(ATTEMPTS):
            if self._create(mine):
                self.holder = mine
                return self
            found = self.read()
            if found is None:
                continue  # released meanwhile: try again
            if not found.is_gone():
                raise refusal(str(self.folder), found, self.hint, str(self.path))
            if self._take_over(found):
                warn_take_over(str(self.folder), found, "which is no longer running")
        raise LockedError(f"{self.folder}: other processes keep taking its lock {self.path}: wait, or {self.hint}")

    def __exit__(self, *exc) -> None:
        """Remove the lock if it is still this holding's."""
        if self.holder is not None and self.read() == self.holder:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.holder = None

    def _create(self, holder: Holder) -> bool:
        try:
            descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as handle:
            handle.write(holder.to_text())
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def read(self) -> Holder | None:
        """The holder of the lock; None when there is no lock. A lock that stays unreadable (written by something else)
        is refused: it cannot be told whether its writer runs."""
        for _ in range(3):
            try:
                holder = Holder.from_text(self.path.read_text())
            except FileNotFoundError:
                if self.path.is_symlink():  # a link to nothing: no process creates its lock that way
                    raise LockedError(f"{self.folder}: its lock {self.path} is a link to a missing file: delete it if "
                                      "no run writes there") from None
                return None
            except (IsADirectoryError, UnicodeDecodeError, PermissionError):
                break  # a folder, binary or unreadable: not a lock this code wrote
            if holder is not None:
                return holder
            time.sleep(UNREADABLE_WAIT)
        raise LockedError(f"{self.folder}: its lock {self.path} is unreadable: delete it if no run writes there")

    def _take_over(self, stale: Holder) -> bool:
        """Move the stale lock aside and drop it, if it is still the one read (two processes may take over at once:
        only the one that moves the stale lock itself succeeds; a fresh lock moved by mistake is put back)."""
        aside = self.path.with_name(f"{self.path.name}.{os.getpid()}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        moved = Holder.from_text(aside.read_text())
        if moved is not None and moved.token != stale.token:
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            aside.unlink()
            return False
        aside.unlink()
        return True
