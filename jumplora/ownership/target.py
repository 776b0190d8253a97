"""The one writer of a folder the product owns, `Target` (the rules: the package's docstring). `write_text` and
`written` are the primitives every writer of the product goes through: inside a `Target`'s folder they record,
elsewhere (a temporary folder) they only write aside and rename."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from jumplora.errors import JumpLoRAError, removed_on_failure, writing
from jumplora.ownership.checks import refuse_finished, replaced_dir, shown, staging_dir
from jumplora.ownership.folders import MARKER, Kind, LocalFolder, Owner, read_owner, sha256_of, under

ACTIVE: list[Target] = []  # the targets being written in this process, innermost last


def aside_name(name: str) -> str:
    """A unique name beside `name` (a path relative to its folder) to write it under before it is renamed."""
    head, _, base = name.rpartition("/")
    return f"{head + '/' if head else ''}.{base}.{secrets.token_hex(4)}.tmp"


def aside_target(tmp: str) -> str:
    """The name a unique aside name (`aside_name`) was written for: `a/.b.1f2e3d4c.tmp` → `a/b`."""
    head, _, base = tmp.rpartition("/")
    return f"{head + '/' if head else ''}{base[1:].rsplit('.', 2)[0]}"


class Target:
    """`with Target(path, kind, command, option, overwrite=…, aside=…) as target:` — the folder `path` of `kind`,
    written by `command` (given as `option`; checked up front by `checks.check_target`). Inside the block, the
    product writes into `target.path`: `path` itself, or (`aside`, or `overwrite` over a folder that holds
    something) a staging folder beside it that takes its place once the block ends well; if the block fails, the
    staging folder is cleared and `path` stays as it was. A run cut off in `path` is gone on with in place. The
    record (`MARKER`, an `Owner`) is kept as files are written (`file`, `tree`, `remove`; every `written` path inside
    `target.path` comes here), never by listing a folder (docs/DECISIONS.md, "Ownership by record")."""

    def __init__(self, path: Path, kind: Kind, command: str, option: str, overwrite: bool = False,
                 aside: bool = False) -> None:
        self.final, self.kind, self.command, self.option = Path(path), kind, command, option
        self.overwrite, self.aside = overwrite, aside
        self.kept: list[str] = []  # what a removal kept: not recorded, or changed since

    def __enter__(self) -> Target:
        with writing(self.final):
            finish_swap(self.final, self.kind)
            refuse_finished(self.final, self.kind, self.option, self.overwrite)
            self.replacing = self.aside or (self.overwrite and bool(LocalFolder(self.final).names()))
            self.path = staging_dir(self.final) if self.replacing else self.final
            if self.replacing and self.path.exists():  # what a cut-off write left (checked: recorded, unchanged)
                clear(self.path)
            self.path.mkdir(parents=True, exist_ok=True)
            found = read_owner(LocalFolder(self.path))
            self.owner = found if found is not None and found.recorded else Owner(self.kind.name, self.command)
            for name in self.owner.aside:  # what a write cut off left under a name recorded before it was made
                remove_path(self.path / name)
            self.owner = replace(self.owner, aside=())
            write_record(self.path, self.owner)
        ACTIVE.append(self)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        ACTIVE.remove(self)
        if error is not None:
            if self.replacing:  # the old folder stays as it was
                clear(self.path)
            return
        if self.replacing:
            with writing(self.final), contextlib.ExitStack() as cleanup:
                cleanup.callback(lambda: self.path.exists() and clear(self.path))  # refused below: nothing beside
                refuse_finished(self.final, self.kind, self.option, self.overwrite)  # finished meanwhile by another
                cleanup.pop_all()
                swap_in(self.path, self.final)
        if self.kept:
            print(f"warning: {self.final} keeps {shown(self.kept)}, which jumplora did not write or which changed "
                  "since it wrote them: it deleted only its own files", file=sys.stderr)

    # --- the record

    def note(self, files: dict[str, str | None] | None = None, aside: tuple[str, ...] = (),
             done: tuple[str, ...] = ()) -> None:
        """Record `files` (None: dropped), add the aside names `aside`, drop the aside names `done`; then write it."""
        merged = {**self.owner.files, **(files or {})}
        recorded = {name: digest for name, digest in merged.items() if digest is not None}
        left = tuple(name for name in self.owner.aside if name not in done) + aside
        self.owner = replace(self.owner, files=recorded, aside=left)
        write_record(self.path, self.owner)

    def make_parents(self, name: str) -> None:
        """The folders above `name`, made and recorded where the product makes them."""
        parts = name.split("/")[:-1]
        above = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        made = [folder for folder in above if not (self.path / folder).is_dir()]
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        if made:
            self.owner = replace(self.owner, dirs=tuple(sorted({*self.owner.dirs, *made})))

    def may_replace(self, name: str) -> None:
        """Refuse to put a file at `name` over one the product did not write, or changed since."""
        path = self.path / name
        if (path.exists() or path.is_symlink()) and sha256_of(path) != self.owner.files.get(name, "-"):
            raise JumpLoRAError(f"{path} was not written by jumplora, or changed since it was: jumplora does not "
                                "replace it; move it out and run again")

    # --- writing

    @contextlib.contextmanager
    def file(self, name: str) -> Iterator[Path]:
        """The file `name` (relative to `path`): written by the block at the path it yields, a unique name recorded
        first; then renamed into place and recorded with its SHA-256."""
        self.may_replace(name)
        self.make_parents(name)
        tmp = aside_name(name)
        self.note(aside=(tmp,))
        try:
            with removed_on_failure(self.path / tmp):
                yield self.path / tmp
                os.replace(self.path / tmp, self.path / name)
        except BaseException:
            self.note(done=(tmp,))
            raise
        self.note({name: sha256_of(self.path / name)}, done=(tmp,))

    @contextlib.contextmanager
    def tree(self, name: str) -> Iterator[Path]:
        """The folder `name` written whole by the block into the folder it yields (made under a unique name recorded
        first), put in place of the one there (removed as `remove` removes) and its files recorded. `name` "": the
        block's files go to the top of the target (a library's save, as a saved model is: the target is written
        aside whole), each recorded as it is moved."""
        tmp = aside_name(name or "saved")
        self.make_parents(tmp)
        self.note(aside=(tmp,))
        try:
            with removed_on_failure(self.path / tmp):
                (self.path / tmp).mkdir()
                yield self.path / tmp
                written = self.moved(self.path / tmp, name)
        finally:
            self.note(done=(tmp,))
        self.note(written)

    def moved(self, source: Path, name: str) -> dict[str, str]:
        """Put the folder `source`, which a block just wrote under a unique recorded name, at `name` (renamed whole;
        "": its files moved one by one to the top); returns what it recorded: each file with its SHA-256."""
        files = [Path(root, file) for root, _, found in os.walk(source) for file in found]
        if name and ((self.path / name).exists() or (self.path / name).is_symlink()):
            self.remove(name)
            if (self.path / name).exists():
                raise JumpLoRAError(f"{self.path / name} holds {shown(self.kept)}, which jumplora did not write: move "
                                    "it out and run again")
        placed = {(Path(name) / file.relative_to(source)).as_posix(): file for file in files}
        dirs = {(Path(name) / Path(root).relative_to(source)).as_posix() for root, _, _ in os.walk(source)} - {"."}
        if name:
            os.replace(source, self.path / name)
        else:
            for target, file in placed.items():
                self.may_replace(target)
                self.make_parents(target)
                os.replace(file, self.path / target)
            remove_path(source)  # its folders, emptied
            dirs = set()
        self.owner = replace(self.owner, dirs=tuple(sorted({*self.owner.dirs, *dirs})))
        return {target: sha256_of(self.path / target) for target in placed}

    def remove(self, name: str) -> list[str]:
        """Delete what the record names at or under `name`, if unchanged, then the folders it made there that are
        left empty; what it kept (not recorded, or changed) is returned, and named when the target closes."""
        kept, self.owner = remove_recorded(self.path, self.owner, name)
        self.kept += kept
        return kept


def write_record(folder: Path, owner: Owner) -> None:
    """Write `folder`'s record (aside under a name only this call can have made, then renamed over the marker)."""
    handle, tmp = tempfile.mkstemp(prefix=f"{MARKER}.", suffix=".tmp", dir=folder)
    with os.fdopen(handle, "w") as stream:
        stream.write(owner.text())
    os.replace(tmp, folder / MARKER)


def remove_recorded(folder: Path, owner: Owner, name: str = "") -> tuple[list[str], Owner]:
    """Delete, in `folder` whose record is `owner`, the recorded files at or under `name` ("": all) whose content
    is unchanged, what lies under its aside names there, then its recorded folders there left empty (deepest first);
    the record is rewritten. Returns what it kept there (files and folders not in the record, changed files) and
    the record left."""
    scope = (name,) if name else ()
    mine = [file for file in owner.files if not scope or under(file, scope)]
    changed = [file for file in mine if (folder / file).exists() and sha256_of(folder / file) != owner.files[file]]
    for file in mine:
        if file not in changed:
            (folder / file).unlink(missing_ok=True)
    for aside in owner.aside:
        if not scope or under(aside, scope):
            remove_path(folder / aside)
    made = [d for d in owner.dirs if not scope or under(d, scope)]
    for directory in sorted(made, key=lambda d: d.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            (folder / directory).rmdir()  # left when it holds something the product did not write
    files = {file: digest for file, digest in owner.files.items() if file not in mine or file in changed}
    dirs = tuple(d for d in owner.dirs if (folder / d).is_dir())
    left = replace(owner, files=files, dirs=dirs, aside=tuple(a for a in owner.aside if (folder / a).exists()))
    target = folder / name if name else folder
    kept = [] if not target.is_dir() else [f"{name + '/' if name else ''}{file}" for file in
                                           LocalFolder(target).files() if file != MARKER]
    if folder.is_dir():
        write_record(folder, left)
    if name and (folder / name).is_file():  # a file at `name` that changed
        kept.append(name)
    return kept, left


def remove_path(path: Path) -> None:
    """Remove what lies at `path`, a name the product recorded before it made it (a file or folder written aside)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clear(folder: Path) -> list[str]:
    """Delete everything the product recorded writing in `folder` (unchanged), and the folder with its record once
    nothing else is left; returns what it kept."""
    owner = read_owner(LocalFolder(folder))
    kept = remove_recorded(folder, owner)[0] if owner is not None and owner.recorded else \
        [name for name in LocalFolder(folder).files() if name != MARKER]
    if not kept:
        (folder / MARKER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()
    return kept


def swap_in(staging: Path, final: Path) -> None:
    """Put the complete folder `staging` in place of `final` (two renames; `finish_swap` completes a cut-off one),
    then clear the old one by its record (an empty one is simply removed); what it keeps stays in
    `replaced_dir(final)`, named in one line."""
    if final.exists():
        os.rename(final, replaced_dir(final))
    os.rename(staging, final)
    clear_replaced(final)


def finish_swap(final: Path, kind: Kind) -> None:
    """Complete a `swap_in` cut between its renames: the new folder if it was complete (`kind.done`), else the old
    one goes back; then the old one is cleared."""
    replaced = replaced_dir(final)
    if not replaced.exists():
        return
    if not final.exists():
        staging = staging_dir(final)
        os.rename(staging if staging.exists() and kind.done(LocalFolder(staging)) else replaced, final)
    clear_replaced(final)


def clear_replaced(final: Path) -> None:
    replaced = replaced_dir(final)
    if not replaced.exists():
        return
    with writing(replaced):
        kept = clear(replaced)
    if kept:
        print(f"warning: {replaced} keeps {shown(kept)}, which jumplora did not write or which changed since it "
              f"wrote them (in {final} while it was replaced): move what you need and delete the folder",
              file=sys.stderr)


def holder(path: Path) -> tuple[Target, str] | None:
    """The active target whose folder holds `path`, and the path's name in it (not one inside a folder being written
    aside, which `Target.tree` records whole)."""
    absolute = Path(os.path.abspath(path))
    for target in reversed(ACTIVE):
        base = Path(os.path.abspath(target.path))
        if base in absolute.parents:
            name = absolute.relative_to(base).as_posix()
            if not under(name, target.owner.aside):
                return target, name
    return None


@contextlib.contextmanager
def written(path: Path) -> Iterator[Path]:
    """Where to write the file `path`: a unique name beside it, renamed into place when the block ends well (removed
    when it fails); recorded by the `Target` whose folder holds it."""
    found = holder(path)
    with writing(path):
        if found is not None:
            target, name = found
            with target.file(name) as tmp:
                yield tmp
            return
        tmp = path.parent / aside_name(path.name)
        with removed_on_failure(tmp):
            yield tmp
            os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    """`path` holds `text` whole or is left as it was (`written`); a failed write (a full disk) leaves nothing behind
    and is a `WriteError` naming the file."""
    with written(path) as tmp:
        tmp.write_text(text)
