"""What a command may write: only what the product wrote itself (Rule 1). The one place that decides it.

Every folder the product writes as a whole — a run directory (`jumplora run --out`), a saved model (`--save-model`),
a report (`jumplora report --out`), a Ray job's storage folder (`<storage>/<name>`) — carries `MARKER`, a small JSON
file saying what wrote it (kind, command, version); a cache (`--cache-dir`), which every command adds to, is known by
its entries. A target may be written when it does not exist, is empty, or is a folder of the same kind; anything else
that holds files, or a target inside a marked folder of another kind, is refused with one line before any work
starts (no data or model loaded), and its files are left as they are. Folders written before the marker existed are
recognised by their kind's own files (`Kind.legacy`; docs/DECISIONS.md, "What a command may write"). The folders a
command writes must lie apart: two of its targets that are the same folder, or one inside the other, are refused (an
`--overwrite` swap would carry the other away).

A finished artifact that another command wrote — a completed run, a saved model, a report (`Kind.finished`) — is
replaced only with `--overwrite` (`refuse_finished`, checked up front and again when the new one is put in place),
and only once the new one is complete: it is written aside and swapped in (`written_aside`, `swap_in`). The other
kinds are never replaced: a cache is added to, a Ray job's folder is resumed by the same job and refused to another
(`Owner.job`), `jumplora data build` writes only a new folder.

Ownership goes down to files, as rsync and git keep it: once a command has finished writing a folder, the marker lists
every file in it (`seal`). A folder of the right kind that holds a file the product did not write — not in that list,
and not one of the names the product writes aside (`ASIDE`) or, for a folder sealed before lists were kept, one of its
kind's own names (`Kind.files`) — is refused up front with one line naming the file; replacing a folder
(`--overwrite`, a later save) removes only the files it lists (`remove_owned`), so nothing else is ever deleted. A
target path that is itself a symbolic link is refused, never swapped (the swap would move the link, not the folder):
the line names the folder it points to.

Targets are read through `Folder` (a local directory here; a storage URI in `ray_jobs.storage`), so the same rules
hold for an `s3://` grid folder."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from jumplora import __version__
from jumplora.errors import JumpLoRAError, removed_on_failure, writing
from jumplora.lock import lock_path

MARKER = ".jumplora-owner.json"
OVERWRITE = "--overwrite"  # the option that lets a command replace a finished artifact (`refuse_finished`)
SHOWN = 3  # foreign file names a refusal shows


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


def refusal(folder: Folder, kind: Kind, where: str) -> str | None:
    """Why `kind` may not be written into `folder` (named `where` in the line), or None when it may: it does not
    exist, is empty, or is of that kind (by its marker, or by its files when written before markers)."""
    names = folder.names()
    if not names:
        return None
    marker = read_owner(folder)
    if marker is not None:
        if marker.kind == kind.name:
            return not_written(folder, kind, marker, where)
        return (f"{where} holds {what_of(marker)} (written by `{marker.command}`), not {kind.what}: pass another "
                "directory")
    if kind.legacy(folder):
        return not_written(folder, kind, None, where)
    legacy = next((other for other in KINDS.values() if other.legacy(folder)), None)
    if legacy is not None:
        return f"{where} holds {legacy.what}, not {kind.what}: pass another directory"
    shown = ", ".join(sorted(names)[:SHOWN]) + (", …" if len(names) > SHOWN else "")
    return (f"{where} holds files jumplora did not write ({shown}): it writes only into a new or empty directory or "
            f"{kind.what} of its own; pass another directory")


def not_written(folder: Folder, kind: Kind, marker: Owner | None, where: str) -> str | None:
    """Why `folder`, {kind.what} of the product's, may not be written: a file in it that the product did not write
    (replacing the folder would delete it), or None."""
    found = foreign_files(folder, kind, marker)
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"{where} is {kind.what} of jumplora's, but holds {found[0]}{more}, which jumplora did not write: move it "
            "out (jumplora replaces only what it wrote) or pass another directory")


def what_of(marker: Owner) -> str:
    """A marked folder's kind in a refusal: "a run directory", or "a grid_lambda.py folder" for an unknown kind."""
    return KINDS[marker.kind].what if marker.kind in KINDS else f"a {marker.kind} folder"


def check(path: Path | None, kind: Kind, option: str, overwrite: bool = False) -> None:
    """Refuse writing `kind` into the local `path` (given as `option`) unless it is new, empty or of that kind, and,
    without `overwrite`, not a finished one (`refuse_finished`); a path that is a file, or lies inside one, is refused
    too."""
    if path is None:
        return
    refuse_link(path, option)
    blocker = next((found for found in (path, *path.parents) if found.exists() or found.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        where = "is a file" if blocker == path else f"is inside the file {blocker}"
        raise JumpLoRAError(f"{option} {path} {where}: pass a directory")
    problem = refusal(LocalFolder(path), kind, f"{option} {path}") or enclosing(path, kind, f"{option} {path}")
    if problem is not None:
        raise JumpLoRAError(problem)
    refuse_finished(path, kind, option, overwrite)


def refuse_finished(path: Path, kind: Kind, option: str, overwrite: bool) -> None:
    """The rule of every writing option: a finished artifact at `path` (a folder of `kind`, checked to be one) that
    another command wrote is replaced only with `overwrite`. Checked before any work, and again just before the new
    one takes its place (another command may have finished one there meanwhile)."""
    folder = LocalFolder(path)
    if overwrite or kind.finished is None or not folder.names() or not kind.done(folder):
        return
    marker = read_owner(folder)
    by = f" (written by `{marker.command}`)" if marker is not None else ""
    raise JumpLoRAError(f"{option} {path} already holds {kind.finished}{by}: pass {OVERWRITE} to replace it once "
                        f"the new one is complete, or another {option}")


def add_overwrite(parser, also: str = "") -> None:
    """`--overwrite`, for a command whose writing options (tagged `writes`, added before) write a kind that
    `refuse_finished` protects; its help, from here for every command, names them (`also`: what else it does)."""
    options = [action.option_strings[0] for action in parser._actions
               if getattr(action, "writes", None) is not None and action.writes.finished is not None]
    parser.add_argument(OVERWRITE, action="store_true", help=(
        f"replace what an earlier command finished at {', '.join(options)}: the new one is written aside and takes "
        f"its place only once complete (never a file jumplora did not write){also}"))


def refuse_link(path: Path, option: str) -> None:
    """A target that is a symbolic link is refused, never swapped: the line names the folder it points to."""
    if path.is_symlink():
        raise JumpLoRAError(f"{option} {path} is a symbolic link (to {os.path.realpath(path)}): jumplora writes "
                            "only into a real directory, which it may replace whole; pass the directory itself or "
                            "another path")


def enclosing(path: Path, kind: Kind, where: str) -> str | None:
    """Why `kind` may not be written at the local `path` because it lies inside a marked folder of another kind (a
    run directory inside a grid's folder would be the grid's to replace), or None."""
    for parent in Path(os.path.abspath(path)).parents:
        marker = read_owner(LocalFolder(parent))
        if marker is not None and marker.kind != kind.name:
            return (f"{where} lies inside {what_of(marker)} written by `{marker.command}` ({parent}): pass a "
                    "directory outside it")
    return None


def check_aside(path: Path, kind: Kind, option: str, target: Path, what: str) -> None:
    """A folder the product keeps beside `target` (a staging copy, the old run during a swap) and may delete: it
    must not exist, or be an empty folder or one of `kind`; checked before any work, not when it is reached."""
    if not (path.exists() or path.is_symlink()):
        return
    if not path.is_dir() or path.is_symlink():
        raise JumpLoRAError(f"{option} {target}: {path}, where jumplora keeps {what}, is not a directory jumplora "
                            "wrote: move it away or pass another directory")
    problem = refusal(LocalFolder(path), kind, f"{path} (where jumplora keeps {what} of {option} {target})")
    if problem is not None:
        raise JumpLoRAError(problem)


def check_lock_file(path: Path, option: str, target: Path) -> None:
    """The lock beside `target` is a file when it exists (a folder or a dangling link there would fail late)."""
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise JumpLoRAError(f"{option} {target}: its lock {path} is not a file: move it away or pass another "
                            "directory")


def check_apart(targets: Iterable[tuple[str, str | Path | None]]) -> None:
    """The folders one command writes are pairwise apart: none is another, or inside another."""
    given = [(option, Path(os.path.realpath(os.path.expanduser(path)))) for option, path in targets
             if path is not None]
    for i, (option, path) in enumerate(given):
        for other_option, other in given[i + 1:]:
            if path == other:
                how = "are the same directory"
            elif path in other.parents or other in path.parents:
                how = "overlap (one lies inside the other)"
            else:
                continue
            raise JumpLoRAError(f"{option} {path} and {other_option} {other} {how}: each must be a directory of its "
                                "own")


def claim(path: Path, kind: Kind, command: str) -> None:
    """Create `path` if needed and mark it as `kind`, written by `command` (a marker already there is kept)."""
    with writing(path):
        path.mkdir(parents=True, exist_ok=True)
        if not (path / MARKER).exists():
            _write_marker(path, Owner.mark(kind, command))


def seal(path: Path, kind: Kind, command: str) -> None:
    """Record in the marker every file `path` holds now: what `command` wrote there (called once it has finished
    writing the folder, or a checkpoint of it; every other file was refused before it began, `not_written`)."""
    with writing(path):
        _write_marker(path, Owner.mark(kind, command, [name for name in LocalFolder(path).files() if name != MARKER
                                                       and not re.fullmatch(ASIDE, name)]))


def _write_marker(path: Path, text: str) -> None:
    tmp = path / f".{MARKER}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path / MARKER)


def remove_owned(path: Path, kind: Kind) -> list[str]:
    """Delete what the product wrote in the folder `path`, of `kind` (its marker's list, else the kind's own names;
    what it wrote aside; the marker), then the folders left empty; the files it did not write stay (returned: a
    user's file added during the command), and so does `path` with them and its marker, listing nothing now: a later
    command names them (`not_written`)."""
    folder = LocalFolder(path)
    marker = read_owner(folder)
    kept = set(foreign_files(folder, kind, marker))
    for name in folder.files():
        if name not in kept and name != MARKER:
            (path / name).unlink()
    if kept and marker is not None:  # still the product's folder, holding nothing of the product's now
        _write_marker(path, Owner.mark(kind, marker.command, []))
    elif not kept:
        (path / MARKER).unlink(missing_ok=True)
    for root, _, _ in os.walk(path, topdown=False):  # deepest first, so a parent sees its emptied children gone
        if not os.listdir(root):
            os.rmdir(root)
    return sorted(kept)


def writes(action, kind: Kind):
    """Tag the argparse `action` as naming a folder of `kind` that the command writes: the option's metadata, from
    which the tests enumerate every writing option of every command."""
    action.writes = kind
    return action


def check_run(out: Path, save_model: Path | None, cache_dir: Path, overwrite: bool = False) -> None:
    """Everything `jumplora run` will write, checked before it loads anything: `--out` (a run directory, whose
    completed run only `--overwrite` replaces), what it keeps beside it (the staging copy, the old run during a swap,
    the lock), `--save-model` (likewise, and where it is written aside and swapped), `--cache-dir`, all apart."""
    check_apart([("--out", out), ("--save-model", save_model), ("--cache-dir", cache_dir)])
    check(out, RUN, "--out", overwrite)
    for aside, what in ((staging_dir(out), "the new run of an --overwrite"), (replaced_dir(out), "the old run "
                                                                               "during an --overwrite swap")):
        check_aside(aside, RUN, "--out", out, what)
    check_lock_file(lock_path(out), "--out", out)
    if save_model is not None:
        check_written_aside(save_model, MODEL, "--save-model", overwrite)
    check(cache_dir, CACHE, "--cache-dir")


def check_written_aside(path: Path, kind: Kind, option: str, overwrite: bool) -> None:
    """`check`, and the folders `written_aside` keeps beside `path`: the new one while it is written, the old one
    during the swap."""
    check(path, kind, option, overwrite)
    check_aside(aside_of(path), kind, option, path, f"{kind.what} while it is written")
    check_aside(replaced_dir(path), kind, option, path, f"the old {kind.what.removeprefix('a ')} during a swap")


@contextlib.contextmanager
def written_aside(path: Path, kind: Kind, command: str, option: str, overwrite: bool) -> Iterator[Path]:
    """Where to write a new folder of `kind` for `path`: beside it (`aside_of`); once the block has written it, it is
    sealed and put in place, the one there (checked: `check_written_aside`) swapped out only now, and a finished one
    only with `overwrite` (`refuse_finished`). If the block fails, `path` is left as it was and nothing beside."""
    where = aside_of(path)
    with writing(path), removed_on_failure(where):
        if where.exists():  # what a cut-off write left (checked: only ours)
            remove_owned(where, kind)
        claim(where, kind, command)
        yield where
        seal(where, kind, command)
        refuse_finished(path, kind, option, overwrite)
        if path.exists():
            swap_in(where, path, kind)
        else:
            os.rename(where, path)


def aside_of(directory: Path) -> Path:
    """Where a saved model or a report is written before it is renamed into place (`written_aside`)."""
    return directory.with_name(f".{directory.name}.tmp")


def staging_dir(out_dir: Path) -> Path:
    """Where `jumplora run --overwrite` writes the new run beside the old one, swapped in only when complete."""
    return out_dir.parent / f".{out_dir.name}.staging"


def replaced_dir(out_dir: Path) -> Path:
    """Where the old run waits during the swap, until the new one is in place."""
    return out_dir.parent / f".{out_dir.name}.replaced"


def swap_in(staging: Path, out_dir: Path, kind: Kind) -> None:
    """Put the complete folder `staging` in place of `out_dir` (two renames; `finish_swap` completes a cut-off one),
    then delete what the product wrote of the old one (`remove_old`)."""
    with writing(out_dir):
        remove_old(out_dir, kind)
        os.rename(out_dir, replaced_dir(out_dir))
        os.rename(staging, out_dir)
    remove_old(out_dir, kind)


def finish_swap(out_dir: Path, done: str, kind: Kind) -> None:
    """Complete a `swap_in` cut between its renames: the new folder if it was complete (it holds the file `done`,
    which its writer writes last), else the old one goes back."""
    replaced = replaced_dir(out_dir)
    if not replaced.exists():
        return
    if not out_dir.exists():
        staging = staging_dir(out_dir)
        os.rename(staging if (staging / done).exists() else replaced, out_dir)
    remove_old(out_dir, kind)


def remove_old(out_dir: Path, kind: Kind) -> None:
    """Delete the files the product wrote in the old folder of a swap (`ownership.remove_owned`); a file it did not
    write (added there while the command ran, after its check) is kept in the old folder, and a line says where."""
    replaced = replaced_dir(out_dir)
    if not replaced.exists():
        return
    with writing(replaced):
        kept = remove_owned(replaced, kind)
    if kept:
        print(f"warning: {replaced} keeps {', '.join(kept[:3])}{', …' if len(kept) > 3 else ''}, which jumplora did "
              f"not write (added to {out_dir} while it ran): move what you need and delete the folder",
              file=sys.stderr)
