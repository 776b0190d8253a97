"""What a command may write and delete: only what the product recorded writing (Rule 1). The one place that decides.

Every folder the product writes as a whole (a run directory, a saved model, a report, a built data folder) is
written through one `Target`, which keeps its record, `MARKER`: the kind, the command, and every file it wrote there
with its SHA-256, added as the file is put in place (never by listing the folder), and the aside names it writes
before renaming. Deleting or replacing deletes a path only when the record names it, unchanged; anything else is
kept and named in one line. Every target is checked before any work (`check_run`, `check_target`, `check_job`).
The rules and why: docs/DECISIONS.md, "Ownership by record" (issue 54).

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
