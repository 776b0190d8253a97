"""What a folder is and what the product recorded writing in it: `Folder` (a local directory here, a storage URI in
`jumplora.storage`), the kinds of folder the product writes (`Kind`, `KINDS`) and the record `MARKER`, which names
the kind, the command and every file the product wrote there with its content's SHA-256 (`Owner`, `found`)."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from jumplora import __version__

MARKER = ".jumplora-owner.json"


class Folder(Protocol):
    """A folder as ownership reads it."""

    def names(self, sub: str = "") -> set[str] | None:
        """The entries of the folder (or of its sub-folder `sub`); None when that is not a folder."""

    def read_text(self, name: str) -> str | None:
        """The text of the file `name`, or None when there is none (or it cannot be read)."""

    def files(self) -> list[str]:
        """Every file under the folder, as paths relative to it with `/` (a symbolic link is a file here)."""

    def sha256(self, name: str) -> str | None:
        """The SHA-256 of the file `name`, or None when it is not a file (a folder, a link, nothing)."""


def sha256_of(path: Path) -> str | None:
    """The SHA-256 of the regular file `path` (never through a link), or None when it is not one."""
    if path.is_symlink() or not path.is_file():
        return None
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class LocalFolder:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def names(self, sub: str = "") -> set[str] | None:
        folder = self.path / sub if sub else self.path
        return {entry.name for entry in folder.iterdir()} if folder.is_dir() else None

    def read_text(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def files(self) -> list[str]:
        found = []
        for root, dirs, names in os.walk(self.path):  # a link to a folder is listed, not followed
            here = Path(root).relative_to(self.path)
            found += [(here / name).as_posix() for name in names]
            found += [(here / name).as_posix() for name in dirs if (Path(root) / name).is_symlink()]
            # an empty folder is something of the user's too (the product records the folders it makes)
            found += [(here / name).as_posix() + "/" for name in dirs
                      if not (Path(root) / name).is_symlink() and not any((Path(root) / name).iterdir())]
        return sorted(found)

    def sha256(self, name: str) -> str | None:
        return sha256_of(self.path / name)


@dataclass(frozen=True)
class Kind:
    """What a folder is. `records`: the product records every file it writes there (a Ray job's folder is shared with
    Ray, which writes its own files: only the job's marker is kept there, nothing deleted by it). A finished one
    (`done`; one that is not was cut off, to be resumed) is replaced only with `--overwrite`; `finished` None: the
    kind is never replaced (a cache is added to, a job's folder resumed)."""

    name: str  # recorded in the marker
    what: str  # in a refusal: "a run directory"
    finished: str | None = None  # in a refusal: "a completed run"
    done: Callable[[Folder], bool] = lambda folder: True  # a folder of the kind is finished (put in place complete)
    records: bool = True
    known: Callable[[Folder], bool] = lambda folder: False  # a cache: taken without a marker, by what it holds


@dataclass(frozen=True)
class Owner:
    """A folder's record: its kind, the command that wrote it, and (`files`) every file the product wrote there with
    its SHA-256, added as each was written; `dirs`, the folders it made there; `aside`, the unique names it was about
    to write (a file or folder written aside and renamed into place): what a command cut off left under them is its
    own. `files` None: a marker of a version that did not record (read, never written into again). `job`: a Ray job's
    folder, the digest of the job's configuration (`job_digest`)."""

    kind: str
    command: str
    version: str = __version__
    files: dict[str, str] | None = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    aside: tuple[str, ...] = ()
    job: str | None = None

    def text(self) -> str:
        data = {"kind": self.kind, "command": self.command, "version": self.version}
        data |= {} if self.job is None else {"job": self.job}
        if self.files is not None:
            data |= {"record": dict(sorted(self.files.items())), "dirs": sorted(self.dirs),
                     "aside": sorted(self.aside)}
        return json.dumps(data, indent=0)

    @property
    def recorded(self) -> bool:
        return self.files is not None


def job_digest(identity: dict) -> str:
    """A job's configuration (what must match for a job to resume another's folder) as the marker keeps it."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def inside(name: object) -> bool:
    """`name` is a path that stays inside its folder: relative, with `/`, no `..`, `.` or empty part (a record edited
    to name `../x` or `/etc/x` names nothing of the folder's)."""
    return isinstance(name, str) and bool(name) and not name.startswith("/") and "\\" not in name \
        and "\x00" not in name and all(part not in ("", ".", "..") for part in name.split("/")) \
        and posixpath.normpath(name) == name


def is_record(files: object, aside: object) -> bool:
    """`files` maps names inside the folder to SHA-256s and `aside` lists names inside it: a record's, or no one's
    (a record edited to name `../x` or `/etc/x` names nothing)."""
    return isinstance(files, dict) and isinstance(aside, list) and all(map(inside, aside)) and all(
        inside(name) and isinstance(digest, str) and len(digest) == 64 for name, digest in files.items())


def read_owner(folder: Folder) -> Owner | None:
    """The marker of `folder`, or None when it has none, or one that is not the product's (unreadable, or a record
    naming a path outside the folder: then it is someone else's file, and the folder is not the product's)."""
    text = folder.read_text(MARKER)
    try:  # no file (None), not JSON, not an object of these fields: a TypeError, ValueError, AttributeError, KeyError
        data = json.loads(text)
        job = data.get("job")
        owner = Owner(str(data["kind"]), str(data["command"]), str(data["version"]), None,
                      job=str(job) if job is not None else None)
        if "record" not in data:
            return owner  # of a version that did not record what it wrote
        files, dirs, aside = data["record"], data.get("dirs", []), data.get("aside", [])
        if not (is_record(files, aside) and isinstance(dirs, list) and all(map(inside, dirs))):
            return None
        return replace(owner, files=dict(files), dirs=tuple(dirs), aside=tuple(aside))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def under(name: str, folders: tuple[str, ...]) -> bool:
    """`name` is one of `folders` or lies inside one."""
    return any(name == folder or name.startswith(folder + "/") for folder in folders)


def unowned(folder: Folder, owner: Owner) -> tuple[list[str], list[str]]:
    """What a recorded `folder` holds that the product may not delete: (the files and empty folders not in its
    record, the recorded files whose content changed since). What lies under a recorded aside name is the product's
    (a write cut off)."""
    found = [name for name in folder.files() if name != MARKER and not under(name.rstrip("/"), owner.aside)]
    foreign = [name for name in found if name not in owner.files and name.rstrip("/") not in owner.dirs]
    changed = [name for name in found if name in owner.files and folder.sha256(name) != owner.files[name]]
    return foreign, changed


# a run directory is finished once its results.json is written (last); one cut off is resumed by the same run
RUN = Kind("run", "a run directory", "a completed run", lambda folder: "results.json" in (folder.names() or ()))
MODEL = Kind("model", "a saved model", "a saved model")
def only(pattern: str) -> Callable[[Folder], bool]:
    """The folder holds something, and every entry matches `pattern`."""
    compiled = re.compile(pattern)
    return lambda folder: bool(found := folder.names()) and all(compiled.fullmatch(name) for name in found)


# a cache has no one writer (every command adds to it): never marked, never replaced, nothing in it deleted
CACHE = Kind("cache", "a jumplora cache", records=False, known=only(r"\.?tiny-.*|single_task|CL_Benchmark"))
REPORT = Kind("report", "a report folder", "a report")
DATA = Kind("data", "a CL_Benchmark folder")  # `jumplora data build` writes only a new one


KINDS: dict[str, Kind] = {}


def register(*kinds: Kind) -> None:
    """Make kinds known, so that a folder of one of them is named as such in a refusal (the Ray jobs add theirs)."""
    KINDS.update({kind.name: kind for kind in kinds})


register(RUN, MODEL, CACHE, REPORT, DATA)
