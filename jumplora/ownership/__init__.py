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

Targets are read through `Folder` (a local directory here; a storage URI in `jumplora.storage`), so the same rules
hold for an `s3://` grid folder.

The package, by concern: `folders` (what a folder is, its marker, the kinds), `checks` (what a command may write,
refused up front), `replacing` (writing aside and swapping in)."""

from jumplora.ownership.checks import (
    OVERWRITE,
    add_overwrite,
    check,
    check_apart,
    check_lock_file,
    check_run,
    check_written_aside,
    enclosing,
    refusal,
    refuse_finished,
    refuse_link,
    replaced_dir,
    staging_dir,
    writes,
)
from jumplora.ownership.folders import (
    ASIDE,
    CACHE,
    DATA,
    KINDS,
    MARKER,
    MODEL,
    REPORT,
    RUN,
    Folder,
    Kind,
    LocalFolder,
    Owner,
    any_of,
    claim,
    job_digest,
    read_owner,
    register,
    seal,
)
from jumplora.ownership.replacing import finish_swap, remove_owned, swap_in, written_aside

__all__ = ["ASIDE", "CACHE", "DATA", "KINDS", "MARKER", "MODEL", "OVERWRITE", "REPORT", "RUN", "Folder", "Kind",
           "LocalFolder", "Owner", "add_overwrite", "any_of", "check", "check_apart", "check_lock_file", "check_run",
           "check_written_aside", "claim", "enclosing", "finish_swap", "job_digest", "read_owner", "refusal",
           "refuse_finished", "refuse_link", "register", "remove_owned", "replaced_dir", "seal", "staging_dir",
           "swap_in", "writes", "written_aside"]
