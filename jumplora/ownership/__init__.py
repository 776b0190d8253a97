"""What a command may write and delete: only what the product recorded writing (Rule 1). The one place that decides.

Every folder the product writes as a whole — a run directory (`jumplora run --out`), a saved model (`--save-model`),
a report (`jumplora report --out`), a built data folder (`jumplora data build`) — is written through one `Target`,
which keeps the folder's record, `MARKER`: the kind of folder, the command, and every file the product wrote there
with its SHA-256, added at the moment the file is put in place (never by listing the folder), and the unique names
it writes aside before renaming, named before they are made. Deleting or replacing deletes a path only when the
record names it and its content still has the recorded hash; anything else is kept and named in one line.

Up front, before any work (`check`, `check_run`, `check_target`): a target may be written when it does not exist,
is empty, or is a folder of the same kind whose record names every file it holds, unchanged. A folder without a
record is never the product's, whatever its files are called (a cache, which is only added to, is known by its
entries); one written by a version that did not record is read (report, track, eval) but never written again. The
refusal names what it found and asks for `--overwrite` only where everything there is the product's. A finished
artifact is replaced only with `--overwrite`, once the new one is complete: written aside and swapped in. A target
that is a symbolic link is refused, and the folders one command writes must lie apart.

A Ray job's folder (`jumplora.storage`) is shared with Ray, which writes its own files there: it carries the job's
marker (kind and the digest of its configuration), is resumed by the same job only and never replaced.

The package, by concern: `folders` (a folder, its record, the kinds), `checks` (refused up front), `target` (the
writer)."""

from jumplora.ownership.checks import (
    add_overwrite,
    check_job,
    check_run,
    check_target,
    job_marker,
    refuse_link,
    writes,
)
from jumplora.ownership.folders import CACHE, DATA, KINDS, MARKER, MODEL, REPORT, RUN, Kind, register
from jumplora.ownership.target import Target, write_text, written

__all__ = ["CACHE", "DATA", "KINDS", "MARKER", "MODEL", "REPORT", "RUN", "Kind", "Target", "add_overwrite",
           "check_job", "check_run", "check_target", "job_marker", "refuse_link", "register", "write_text", "writes",
           "written"]
