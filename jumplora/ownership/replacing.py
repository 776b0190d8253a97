"""A finished folder replaced only once the new one is complete: written aside and swapped in (`written_aside`,
`swap_in`, `finish_swap` for a swap cut off), deleting only the files the product wrote (`remove_owned`)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from jumplora.errors import removed_on_failure, writing
from jumplora.ownership.checks import aside_of, refuse_finished, replaced_dir, staging_dir
from jumplora.ownership.folders import (
    MARKER,
    Kind,
    LocalFolder,
    Owner,
    claim,
    foreign_files,
    read_owner,
    seal,
    write_marker,
)


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
        write_marker(path, Owner.mark(kind, marker.command, []))
    elif not kept:
        (path / MARKER).unlink(missing_ok=True)
    for root, _, _ in os.walk(path, topdown=False):  # deepest first, so a parent sees its emptied children gone
        if not os.listdir(root):
            os.rmdir(root)
    return sorted(kept)


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
