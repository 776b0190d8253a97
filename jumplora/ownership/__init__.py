"""What a command may write and delete: only what the product recorded writing (Rule 1), decided here alone, by
concern: `folders` (a folder, its record `MARKER`, the kinds), `checks` (every target refused up front, before any
work: `check_run`, `check_target`, `check_job`), `target` (`Target`, the one writer, which keeps the record as it
writes). The rules and why: docs/DECISIONS.md, "Ownership by record" (issue 54)."""

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
