"""May a command write there: every target checked before any work starts (`check`, `check_run`), in one line
naming what is wrong — a folder of another kind, a file the product did not write, a finished artifact without
`--overwrite`, a symbolic link, two targets that overlap."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

from jumplora.errors import JumpLoRAError
from jumplora.lock import lock_path
from jumplora.ownership.folders import (
    CACHE,
    KINDS,
    MARKER,
    MODEL,
    RUN,
    Folder,
    Kind,
    LocalFolder,
    Owner,
    job_digest,
    read_owner,
    unowned,
)

OVERWRITE = "--overwrite"  # the option that lets a command replace a finished artifact (`refuse_finished`)
SHOWN = 3  # names a refusal shows


def shown(names: list[str]) -> str:
    """The first `SHOWN` of `names`, escaped as Python writes them when they hold a control character, and how many
    more."""
    text = ", ".join(name if name.isprintable() else repr(name) for name in sorted(names)[:SHOWN])
    return text + (f" (and {len(names) - SHOWN} more)" if len(names) > SHOWN else "")


def refusal(folder: Folder, kind: Kind, where: str, resuming: bool = False) -> str | None:
    """Why `kind` may not be written into `folder` (named `where` in the line), or None when it may: it does not
    exist, is empty, or is of that kind by its record, holding only what the record names, unchanged (a cache: by
    what it holds). Nothing is the product's because of its name: a folder without a record is the user's.
    `resuming`: a run cut off is gone on with in place, deleting nothing but its own (recorded) checkpoints, so a
    file of the user's there does not stop it, nor a run cut off by a version that did not record (none of its
    files is ever deleted)."""
    names = folder.names()
    if not names:
        return None
    marker = read_owner(folder)
    if marker is None:
        if kind.known(folder):
            return None
        found = [name for name in folder.files() if name != MARKER] or sorted(names)
        damaged = f"a record {MARKER} jumplora cannot read and " if MARKER in names else ""
        return (f"{where} holds {damaged}files jumplora did not write ({shown(found)}): jumplora writes only into a "
                "new or empty directory or one whose files it recorded writing; pass a new or empty directory, or "
                "move them out")
    if marker.kind != kind.name:
        return (f"{where} holds {what_of(marker)} (written by `{marker.command}`), not {kind.what}: pass another "
                "directory")
    if not kind.records:  # a job's folder, shared with Ray: resumed by its job (`Owner.job`), never replaced
        return None
    if not marker.recorded:  # a run it cut off goes on in place, deleting none of its files
        return None if resuming else (
            f"{where} is {kind.what} written by a version of jumplora that did not record its files: it is read "
            "(report, track, eval, a resume) but never replaced; pass a new or empty directory")
    return None if resuming else not_written(folder, kind, marker, where)


def not_written(folder: Folder, kind: Kind, marker: Owner, where: str) -> str | None:
    """Why `folder`, {kind.what} of the product's, may not be written: a file in it that the product did not write,
    or one it wrote that changed since (replacing the folder would delete it), or None."""
    foreign, changed = unowned(folder, marker)
    if not foreign and not changed:
        return None
    said = [f"holds {shown(foreign)}, which jumplora did not write"] if foreign else []
    said += [f"{shown(changed)} changed since jumplora wrote {'it' if len(changed) == 1 else 'them'}"] if changed \
        else []
    them = "it" if len(foreign) + len(changed) == 1 else "them"
    return (f"{where} is {kind.what} of jumplora's, but {'; '.join(said)}: move {them} out (jumplora deletes only "
            "what it wrote, unchanged) or pass another directory")


def what_of(marker: Owner) -> str:
    """A marked folder's kind in a refusal: "a run directory", or "a grid_lambda.py folder" for an unknown kind."""
    return KINDS[marker.kind].what if marker.kind in KINDS else f"a {marker.kind} folder"


def check(path: Path, kind: Kind, option: str, overwrite: bool = False) -> None:
    """Refuse writing `kind` into the local `path` (given as `option`) unless it is new, empty or of that kind, and,
    without `overwrite`, not a finished one (`refuse_finished`); a path that is a file, or lies inside one, is refused
    too."""
    refuse_link(path, option)
    blocker = next((found for found in (path, *path.parents) if found.exists() or found.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        where = "is a file" if blocker == path else f"is inside the file {blocker}"
        raise JumpLoRAError(f"{option} {path} {where}: pass a directory")
    folder = LocalFolder(path)
    resuming = not overwrite and kind.finished is not None and bool(folder.names()) and not kind.done(folder)
    problem = refusal(folder, kind, f"{option} {path}", resuming) or enclosing(path, kind, f"{option} {path}")
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
        f"its place only once complete (deleting only the files jumplora recorded writing there, unchanged){also}"))


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
    for (option, path), (other_option, other) in itertools.combinations(given, 2):
        if path == other:
            how = "are the same directory"
        elif path in other.parents or other in path.parents:
            how = "overlap (one lies inside the other)"
        else:
            continue
        raise JumpLoRAError(f"{option} {path} and {other_option} {other} {how}: each must be a directory of its own")


def writes(action, kind: Kind):
    """Tag the argparse `action` as naming a folder of `kind` that the command writes: the option's metadata, from
    which the tests enumerate every writing option of every command."""
    action.writes = kind
    return action


def check_run(out: Path, save_model: Path | None, cache_dir: Path, overwrite: bool = False) -> None:
    """Everything `jumplora run` will write, checked before it loads anything: `--out` (a run directory, whose
    completed run only `--overwrite` replaces) and its lock, `--save-model` (likewise), `--cache-dir`, all apart."""
    check_apart([("--out", out), ("--save-model", save_model), ("--cache-dir", cache_dir)])
    check_target(out, RUN, "--out", overwrite)
    check_lock_file(lock_path(out), "--out", out)
    if save_model is not None:
        check_target(save_model, MODEL, "--save-model", overwrite)
    check(cache_dir, CACHE, "--cache-dir")


def check_job(folder: Folder, where: str, kind: Kind, identity: dict, cache_dir: str, local: Path | None) -> None:
    """Refuse, before any work, a Ray job's folder `folder` (named `where` in the line; `local`: its path on a local
    disk) that is not new, empty, or of `kind` marked by this very job (of configuration `identity`), and a
    `--cache-dir` that is not a cache or does not lie apart from it."""
    problem = refusal(folder, kind, where) or (enclosing(local, kind, where) if local is not None else None)
    if problem is not None:
        raise JumpLoRAError(problem)
    marker = read_owner(folder)
    if marker is not None and marker.job not in (None, job_digest(identity)):
        # marked before digests were kept (None): the script's own record refuses another job (manifest, job.json)
        raise JumpLoRAError(f"{where} holds {kind.what} of another configuration (written by `{marker.command}`): "
                            "a job's folder is resumed by the same job only, never replaced; pass another --name")
    check(Path(cache_dir), CACHE, "--cache-dir")
    if local is not None:
        check_lock_file(lock_path(local), "--name", local)
        check_apart([("--storage-path/--name", local), ("--cache-dir", cache_dir)])


def job_marker(kind: Kind, identity: dict) -> str:
    """The marker of a Ray job's folder: its kind and its configuration's digest, no record (Ray writes there too)."""
    return Owner(kind.name, kind.name, files=None, job=job_digest(identity)).text()


def check_target(path: Path, kind: Kind, option: str, overwrite: bool) -> None:
    """`check`, and the folders a `Target` keeps beside `path`: the new one while it is written aside, the old one
    during the swap (each, when there, one the product recorded writing: it is cleared by its record)."""
    check(path, kind, option, overwrite)
    check_aside(staging_dir(path), kind, option, path, f"{kind.what} while it is written aside")
    check_aside(replaced_dir(path), kind, option, path, f"the old {kind.what.removeprefix('a ')} during a swap")


def staging_dir(path: Path) -> Path:
    """Where a `Target` writes a folder aside (a saved model, a report, a run replaced with --overwrite), put in place
    only when complete."""
    return path.parent / f".{path.name}.staging"


def replaced_dir(path: Path) -> Path:
    """Where the old folder waits during the swap, until the new one is in place."""
    return path.parent / f".{path.name}.replaced"
