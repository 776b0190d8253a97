"""What a folder is and who wrote it: `Folder` (a local directory here, a storage URI in `jumplora.storage`), the
kinds of folder the product writes (`Kind`, `KINDS`) and the marker that says which wrote one and, once sealed, which
files (`Owner`, `claim`, `seal`, `foreign_files`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from jumplora import __version__
from jumplora.errors import JumpLoRAError, writing

MARKER = ".jumplora-owner.json"


class Folder(Protocol):
    """A folder as ownership reads it."""

    def names(self, sub: str = "") -> set[str] | None:
        """The entries of the folder (or of its sub-folder `sub`); None when that is not a folder."""

    def read_text(self, name: str) -> str | None:
        """The text of the file `name`, or None when there is none (or it cannot be read)."""

    def files(self) -> list[str]:
        """Every file under the folder, as paths relative to it with `/` (a symbolic link is a file here)."""


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
        return sorted(found)


# what the product writes aside and renames into place (`outputs.atomic_write_text`, a checkpoint being saved, a
# plot): left by a command that was cut off, they are its own
ASIDE = r"(.*/)?\.[^/]*\.tmp(/.*)?"


@dataclass(frozen=True)
class Kind:
    """What a folder is. `legacy` recognises one written before `MARKER` existed, from its own files; `files`, the
    names (paths relative to the folder) the product writes into one, tells its own files in a folder sealed before
    markers listed them (None: not known, and such a folder's files are not checked). `finished` names, in a
    refusal, a finished artifact of the kind, which only `--overwrite` replaces, and `done` tells one from a folder
    that a command cut off left to be resumed; None: the kind is never replaced (a cache is added to, a job's folder
    resumed)."""

    name: str  # recorded in the marker
    what: str  # in a refusal: "a run directory"
    legacy: Callable[[Folder], bool] = lambda folder: False
    files: str | None = None
    finished: str | None = None  # in a refusal: "a completed run"
    done: Callable[[Folder], bool] = lambda folder: True  # a folder of the kind is finished (put in place complete)


@dataclass(frozen=True)
class Owner:
    kind: str
    command: str
    version: str
    files: tuple[str, ...] | None = None  # what the product wrote there (`seal`); None: not listed (yet)
    job: str | None = None  # a Ray job's folder: the digest of the job's configuration (`job_digest`)

    @classmethod
    def mark(cls, kind: Kind, command: str, files: list[str] | None = None, job: str | None = None) -> str:
        """The marker's text for a folder of `kind` that `command` writes now (and, sealed, the files it holds; for a
        job, the digest of its configuration)."""
        data = {"kind": kind.name, "command": command, "version": __version__}
        data |= {} if job is None else {"job": job}
        return json.dumps(data if files is None else {**data, "files": sorted(files)})


def job_digest(identity: dict) -> str:
    """A job's configuration (what must match for a job to resume another's folder) as the marker keeps it."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_owner(folder: Folder) -> Owner | None:
    """The marker of `folder`, or None when it has none (or one that is not ours: then it is someone else's file)."""
    text = folder.read_text(MARKER)
    try:
        data = json.loads(text) if text is not None else None
        if not data:
            return None
        files = data.get("files")
        if files is not None and not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            return None
        job = data.get("job")
        return Owner(str(data["kind"]), str(data["command"]), str(data["version"]),
                     tuple(files) if files is not None else None, str(job) if job is not None else None)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def foreign_files(folder: Folder, kind: Kind, marker: Owner | None) -> list[str]:
    """The files of `folder` (of `kind`) that the product did not write: not in its marker's list, not written aside
    (`ASIDE`), and, where no list was kept, not of the kind's own names; [] when neither tells (a job's folder being
    written)."""
    if marker is not None and marker.files is not None:
        ours = set(marker.files)
    elif kind.files is not None:
        own = re.compile(kind.files)
        ours = {name for name in folder.files() if own.fullmatch(name)}
    else:
        return []
    aside = re.compile(ASIDE)
    return [name for name in folder.files() if name not in ours and name != MARKER and not aside.fullmatch(name)]


def only(pattern: str, sub: str = "") -> Callable[[Folder], bool]:
    """A legacy test: the folder (or its `sub`) holds something, and every entry matches `pattern`."""
    compiled = re.compile(pattern)

    def test(folder: Folder) -> bool:
        found = folder.names(sub)
        return bool(found) and all(compiled.fullmatch(name) for name in found)
    return test


def any_of(*names: str) -> Callable[[Folder], bool]:
    """A legacy test: the folder holds one of `names` (a Ray job's own record: its manifest, job file)."""
    return lambda folder: bool((folder.names() or set()) & set(names))


def legacy_run(folder: Folder) -> bool:
    """A run directory written before markers: a results.json of a schema this version reads, or the checkpoints of a
    run cut off (`checkpoints/after_taskNN`, or one being saved)."""
    from jumplora.results import RunResults

    text = folder.read_text("results.json")
    if text is not None:
        try:
            RunResults.from_json(json.loads(text))
            return True
        except (ValueError, JumpLoRAError):
            return False
    return only(r"\.?after_task\d+(\.tmp)?", "checkpoints")(folder)


# a run directory is finished once its results.json is written (last); one cut off is resumed by the same run
RUN = Kind("run", "a run directory", legacy_run,
           r"results\.json|summary\.txt|updates\.safetensors|accuracy_matrix\.csv|\w+\.png|model_registration\.json"
           r"|checkpoints/.*|merged_model/.*", "a completed run",
           lambda folder: "results.json" in (folder.names() or ()))
# a Hugging Face folder without a marker could be anyone's: not recognised; one marked before lists, by HF's names
MODEL = Kind("model", "a saved model", files=r"[\w.-]+\.(json|safetensors|bin|model|txt|jinja)",
             finished="a saved model")
# a cache has no one writer (every command adds to it): it is known by its entries alone, never marked, never replaced
CACHE = Kind("cache", "a jumplora cache", only(r"\.?tiny-.*|single_task|CL_Benchmark"))
REPORT = Kind("report", "a report folder", only(r"report\.(md|html|json)|.*\.png|\..*\.tmp"),
              r"report\.(md|html|json)|\w+\.png", "a report")
DATA = Kind("data", "a CL_Benchmark folder", any_of("tasks.json"))  # `jumplora data build` writes only a new one


KINDS: dict[str, Kind] = {}


def register(*kinds: Kind) -> None:
    """Make kinds known, so that a folder of one of them is named as such in a refusal (the Ray jobs add theirs)."""
    KINDS.update({kind.name: kind for kind in kinds})


register(RUN, MODEL, CACHE, REPORT, DATA)


def claim(path: Path, kind: Kind, command: str) -> None:
    """Create `path` if needed and mark it as `kind`, written by `command` (a marker already there is kept)."""
    with writing(path):
        path.mkdir(parents=True, exist_ok=True)
        if not (path / MARKER).exists():
            write_marker(path, Owner.mark(kind, command))


def seal(path: Path, kind: Kind, command: str) -> None:
    """Record in the marker every file `path` holds now: what `command` wrote there (called once it has finished
    writing the folder, or a checkpoint of it; every other file was refused before it began, `not_written`)."""
    with writing(path):
        write_marker(path, Owner.mark(kind, command, [name for name in LocalFolder(path).files() if name != MARKER
                                                       and not re.fullmatch(ASIDE, name)]))


def write_marker(path: Path, text: str) -> None:
    tmp = path / f".{MARKER}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path / MARKER)

