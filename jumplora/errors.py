"""`JumpLoRAError`, bad input: one line on stderr and exit code 2; the write failures a user can fix turned into it;
and the boundary of every entry point a user runs (`entry_point`), where an exception no check expected is a bug
(`report_bug`: one line, the traceback in a file, exit code 3)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from safetensors import SafetensorError

# the causes of a failed write that the user fixes, each with what to do
WRITE_FIXES = {errno.ENOSPC: "free some space or write elsewhere",
               errno.EDQUOT: "free some of your quota or write elsewhere",
               **dict.fromkeys((errno.EACCES, errno.EPERM), "write to a directory you may write to"),
               errno.EROFS: "the file system is read-only: write elsewhere"}
# the causes of an OSError about a path the user gave (or one made from it, such as `.<name>.lock` beside --out)
# where it is not known to be a write, each with what to do: the operating system refused the path itself
OS_FIXES = {
    **WRITE_FIXES,
    **dict.fromkeys((errno.EACCES, errno.EPERM), "pass a path you may use, or change its permissions"),
    errno.ENAMETOOLONG: "a name in the path is longer than the file system takes (255 bytes), or the whole path "
                        "(4096): use a shorter path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: fix the path",
    errno.ELOOP: "the path goes round a loop of symbolic links: fix the link",
    errno.EISDIR: "it is a folder where a file is expected: name the file",
}


EXIT_BAD_INPUT = 2  # the input is wrong: the line says how to fix it
EXIT_BUG = 3  # an exception no check expected: a bug, its traceback in a file (`report_bug`)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
DEBUG_ENV = "JUMPLORA_DEBUG"  # set to 1: an unexpected exception's traceback is printed too
TRACEBACKS = "jumplora-tracebacks"  # <tempdir>/jumplora-tracebacks/<command>-<time>-<pid>.txt


class JumpLoRAError(Exception):
    """Bad input or configuration: the message says what is wrong and how to fix it."""


class DivergedError(JumpLoRAError):
    """A training produced a non-finite loss, τ or update: nothing after it would mean anything."""


class WriteError(JumpLoRAError):
    """Writing an output, a checkpoint or the cache failed for one of `WRITE_FIXES`' causes."""

    def __init__(self, path: os.PathLike | str, code: int) -> None:
        super().__init__(f"cannot write {path}: {os.strerror(code)}: {WRITE_FIXES[code]}")
        self.code = code


def error_code(error: BaseException) -> int | None:
    """The errno of an OSError, or of a safetensors error, which only names it in its text ("… (os error 28)")."""
    if isinstance(error, OSError):
        return error.errno
    if isinstance(error, SafetensorError):
        found = re.search(r"os error (\d+)", str(error))
        return int(found.group(1)) if found else None
    return None


def path_error(error: BaseException) -> JumpLoRAError | None:
    """The one-line error for an OSError about a path, not known to be a write (`OS_FIXES`), or for a library's
    refusal of a name, path or address the user gave (an OSError without an errno: a hub name that is no model, a
    host that does not answer); None for any other cause, which stays a bug."""
    code = error_code(error)
    if code in OS_FIXES:
        return JumpLoRAError(f"{getattr(error, 'filename', None) or 'a file'}: {os.strerror(code)}: {OS_FIXES[code]}")
    if isinstance(error, OSError) and code is None:
        said = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return JumpLoRAError(f"{said}: check the name, path or address given")
    return None


def user_error(error: BaseException) -> JumpLoRAError | None:
    """The error the user can fix behind `error`: a JumpLoRAError, also one that a Ray trial or worker raised and Ray
    wrapped (`RayTaskError.cause`, `WorkerGroupError.worker_failures`, `raise … from`), or an OSError about what the
    user gave (`path_error`); else None."""
    todo, seen = [error], set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # a RayTaskError is also an instance of its cause's class
        if isinstance(current, JumpLoRAError) and not isinstance(cause, BaseException):
            return current
        if (found := path_error(current)) is not None:  # an OSError about what the user gave
            return found
        failures = getattr(current, "worker_failures", None)
        todo += [cause, current.__cause__, *(failures.values() if isinstance(failures, dict) else ())]
    return None


def one_line(text: str) -> str:
    """`text` as one printed line: each character that is not printable (a newline, a tab, an escape in a file name
    or a record's field) written as Python writes it in a string (`\\n`, `\\t`, `\\x1b`), so that what the user
    gave reads as given and never splits or recolours the line."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def entry_point(main: Callable[[], int], command: str, prefix: str, interrupted: str) -> int:
    """The boundary of every entry point a user runs, around parsing its arguments and running `main`: bad input
    (`user_error`) is `<prefix><message>` in one line, exit code 2; an interrupt the line `interrupted` and 130; --help
    0; any other exception a bug of `command` (`report_bug`), exit code 3. A library's warnings are held until the
    command ends: shown then, but not beside a refusal, whose one line is the whole of stderr."""
    with warnings.catch_warnings(record=True) as held:
        try:
            code = main()
        except SystemExit as stop:  # argparse's --help
            code = stop.code if isinstance(stop.code, int) else EXIT_BAD_INPUT if stop.code else 0
        except KeyboardInterrupt:
            print(interrupted, file=sys.stderr)
            code = EXIT_INTERRUPTED
        except Exception as error:  # the boundary: every exception ends in one line
            found = user_error(error)
            if found is not None:
                print(one_line(f"{prefix}{found}"), file=sys.stderr)
            code = EXIT_BAD_INPUT if found is not None else report_bug(error, command)
    if code != EXIT_BAD_INPUT:
        for warned in held:  # through the filters again: what the caller ignores stays ignored
            warnings.warn_explicit(warned.message, warned.category, warned.filename, warned.lineno,
                                   source=warned.source)
    return code


@contextlib.contextmanager
def writing(path: os.PathLike | str) -> Iterator[None]:
    """Turn a failed write of `path` (a file or a directory being written) into a `WriteError` naming it; the
    outermost `writing` names the path (a checkpoint, not the file inside its staging folder that failed)."""
    try:
        yield
    except WriteError as error:
        raise WriteError(path, error.code) from error.__cause__
    except (OSError, SafetensorError) as error:
        if error_code(error) not in WRITE_FIXES:  # not a cause the user fixes: a bug, which stays a traceback
            raise
        raise WriteError(path, error_code(error)) from error


@contextlib.contextmanager
def removed_on_failure(path: Path) -> Iterator[None]:
    """Remove `path` (a file or a directory being written) when the block fails."""
    try:
        yield
    except BaseException:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        raise


def report_bug(error: BaseException, command: str) -> int:
    """An exception that no check expected, from `command`: one line naming it and where it was raised, its full
    traceback written to a file under the temporary folder (and printed with `JUMPLORA_DEBUG=1`); `EXIT_BUG`."""
    text = "".join(traceback.format_exception(error))
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        sys.stderr.write(text)
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else ""
    folder = Path(tempfile.gettempdir()) / TRACEBACKS
    log = folder / f"{command.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
        kept = f"the traceback is in {log}"
    except OSError as failed:
        kept = f"the traceback could not be written ({failed.strerror})"
    message = (str(error).strip().splitlines() or [""])[0][:200]
    print(one_line(f"{command}: internal error: {type(error).__name__}{': ' + message if message else ''}{where}; "
                   f"{kept} ({DEBUG_ENV}=1 prints it): please report it"), file=sys.stderr)
    return EXIT_BUG
