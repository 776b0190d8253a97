"""The kinds of value an option takes, each with its range (a whole number ≥ 1, an existing folder, a URI of known
schemes, a comma list...): the argparse `type` of its option, so a bad value is argparse's one line naming the option,
and its facts are fields that a test reads to know which values are valid. A leaf of the package. Numbers are bounded
by what the code can hold: an int by int64 (torch, NumPy), a float by float32 (the tensors it ends up in)."""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

INT_LIMIT = 2**63 - 1  # int64
FLOAT_LIMIT = 3.4028234663852886e38  # float32's largest finite value, torch.finfo(torch.float32).max (no torch here)


def refuse(message: str):
    """argparse turns this into `<prog>: error: argument --option: <message>`."""
    raise argparse.ArgumentTypeError(message)


def shown(value: float) -> str:
    return f"{value:d}" if isinstance(value, int) else f"{value:g}"


class Kind:
    """What an option's value must be."""

    def __call__(self, text: str) -> Any:
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        """What is wrong with an already parsed value (a preset's, a RunConfig's), as `must be …`; None if fine or
        not checked outside parsing (a path is checked where the command runs)."""
        return None


@dataclass(frozen=True)
class Number(Kind):
    """An int (`whole`) or a finite float within [low, high] (`low_open` / `high_open`: the bound excluded), or one
    of `words` (such as `auto`). An unset bound is what the code can hold (`lowest`, `highest`)."""

    whole: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    words: tuple[str, ...] = ()

    @property
    def lowest(self) -> float:
        return self.low if self.low is not None else (-INT_LIMIT - 1 if self.whole else -FLOAT_LIMIT)

    @property
    def highest(self) -> float:
        return self.high if self.high is not None else (INT_LIMIT if self.whole else FLOAT_LIMIT)

    def describe(self) -> str:
        opened, closed = "(" if self.low_open else "[", ")" if self.high_open else "]"
        if self.low is not None and self.high is not None:
            bound = f" in {opened}{shown(self.low)}, {shown(self.high)}{closed}"
        elif self.low is not None:
            bound = f" {'>' if self.low_open else '≥'} {shown(self.low)}"
        else:
            bound = "" if self.high is None else f" {'<' if self.high_open else '≤'} {shown(self.high)}"
        return " or ".join([*self.words, f"a number{bound}"])

    def within_bounds(self, value: float) -> bool:
        """Within the bounds set (not the limits of what the code holds)."""
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def problem(self, value: Any) -> str | None:
        if value in self.words:
            return None
        if isinstance(value, bool) or not isinstance(value, int if self.whole else int | float):
            return f"must be {'a whole number' if self.whole else 'a number'}"
        if not math.isfinite(value):
            return "must be a finite number"
        if not self.within_bounds(value):
            return f"must be {self.describe()}"
        if not self.lowest <= value <= self.highest:  # within the bounds set, beyond what the code holds
            limit, holder = (INT_LIMIT, "int64") if self.whole else (FLOAT_LIMIT, "float32")
            return f"must be {self.describe()} and at most {shown(limit)} in size ({holder} holds no more)"
        return None

    def __call__(self, text: str) -> float | int | str:
        text = text.strip()
        if text in self.words:
            return text
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            kind = "a whole number" if self.whole else "a number"
            refuse(f"expected {' or '.join([*self.words, kind])}, got {text!r}")
        problem = self.problem(value)
        if problem is not None:
            refuse(f"expected {problem.removeprefix('must be ')}, got {text}")
        return value


POSITIVE_INT = Number(whole=True, low=1)
COUNT = Number(whole=True, low=0)
POSITIVE = Number(low=0, low_open=True)
NON_NEGATIVE = Number(low=0)
PROBABILITY = Number(low=0, high=1, high_open=True)  # a dropout rate: 1 would drop everything
FRACTION = Number(low=0, high=1, low_open=True, high_open=True)
SEED = Number(whole=True, low=0, high=2**32 - 1)  # NumPy's seeds


@dataclass(frozen=True)
class Text(Kind):
    """Any non-empty text (a hub name, a preset's name; what it names is checked where it is used)."""


    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) and value.strip() else "must be non-empty text"

    def __call__(self, text: str) -> str:
        if not text.strip():
            refuse(f"expected non-empty text, got {text!r}")
        return text.strip()


@dataclass(frozen=True)
class Name(Text):
    """One folder name under another folder: never a path that leaves it."""

    def __call__(self, text: str) -> str:
        if not text.strip() or text in (".", "..") or "/" in text or "\\" in text:
            refuse(f"expected a folder name (no '/', not '.' or '..'), got {text!r}")
        refuse_control(text)
        return text


@dataclass(frozen=True)
class ModelName(Name):
    """A registered model's name in MLflow: one folder name (MLflow reads it as a path too), without ':' (it would
    break the model's URI models:/NAME/VERSION)."""

    def __call__(self, text: str) -> str:
        if not text.strip() or text == "." or text.startswith("..") or any(c in text for c in "/\\:"):
            refuse(f"expected a model name (no '/', '\\' or ':', not '.' or starting with '..'), got {text!r}")
        refuse_control(text)
        return text


def refuse_control(name: str) -> None:
    """A name holds no control character (a newline, a tab, an escape): it would name a folder no listing shows as
    typed, and split every line that prints it."""
    if not name.isprintable():
        refuse(f"expected a name without control characters (a newline, a tab, ...), got {name!r}")


def nearest_existing(path: Path) -> Path:
    return next(found for found in (path, *path.parents) if found.exists() or found.is_symlink())


# what a path option's value must be
FOLDER, WRITABLE, NEW = "an existing folder", "a folder to write", "a folder to create"
# a model logged to MLflow, in place of its folder: models:/NAME/VERSION, models:/m-<id>, runs:/<run id>/<path>
MODEL_URIS = ("models:/", "runs:/")


@dataclass(frozen=True)
class PathKind(Kind):
    """A path that must be `FOLDER`, `WRITABLE` (a folder, existing or made with its parents: nothing in the
    way is a file, the nearest existing folder is writable) or `NEW` (as `WRITABLE`, and not there yet); or one of
    `words` (such as `synthetic`); or a URI beginning with one of `uris` (`MODEL_URIS`), taken in place of the path
    (what it names is read where the command runs). `result` makes the value (str, or Path)."""

    must: str
    words: tuple[str, ...] = ()
    uris: tuple[str, ...] = ()
    result: Callable[[str], Any] = str

    def __call__(self, text: str) -> Any:
        stripped = text.strip()
        uri = next((prefix for prefix in self.uris if stripped.startswith(prefix)), None)
        if stripped in self.words or (uri is not None and stripped != uri):
            return stripped
        if not stripped or uri is not None:
            uris = [f"a URI {' or '.join(prefix + '…' for prefix in self.uris)}"] if self.uris else []
            refuse(f"expected {' or '.join([*self.words, self.must, *uris])}, got {text!r}")
        problem = path_problem(Path(text).expanduser(), self.must)
        if problem is not None:
            uris = f", or a URI ({', '.join(prefix + '…' for prefix in self.uris)})" if self.uris else ""
            refuse(f"{text} {problem}{uris}")
        return self.result(os.path.expanduser(text))  # the path checked is the path used: `~` is the home folder

    def problem(self, value: Any) -> str | None:
        """Text only: what the path names is checked where the command runs (`path_problem`)."""
        return None if isinstance(value, str | Path) and str(value).strip() else "must be a path (non-empty text)"


def path_problem(path: Path, must: str) -> str | None:
    """What keeps `path` from being what `must` says (`PathKind`), as the end of a sentence naming it; None if fine."""
    if must == FOLDER:
        if path.is_dir():
            return None
        if not path.exists():
            return "does not exist" + (" (a dangling link)" if path.is_symlink() else "") + f": pass {must}"
        return f"is not a folder: pass {must}"
    found = nearest_existing(path.absolute())
    if found == path.absolute() and must == NEW:
        return "exists already: pass a path that does not exist yet"
    if not found.is_dir():
        return f"{'is a file' if found == path.absolute() else f'is inside the file {found}'}: pass {must}"
    try:  # tried, since root's `os.access` says yes to /proc and to read-only mounts alike
        os.rmdir(tempfile.mkdtemp(dir=found, prefix=".jumplora-probe-"))
    except OSError:
        return f"cannot be written ({found} is not writable): pass {must} elsewhere"
    return None


# MLflow's stores: a file store, a server, or SQLAlchemy's databases (`dialect+driver://`)
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "databricks", "postgresql", "mysql", "mssql")
STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "file")  # pyarrow's file systems, as Ray's storage_path takes them


@dataclass(frozen=True)
class Uri(Kind):
    """A URI of one of `schemes` (`dialect+driver` counts as its dialect), or a plain local path, a `WRITABLE`
    folder. A `sqlite:` URI is checked as the database file it names, so that a mistyped one creates nothing."""

    schemes: tuple[str, ...]

    def __call__(self, text: str) -> str:
        text = text.strip()
        problem = uri_problem(text, self.schemes)
        if problem is not None:
            refuse(problem)
        local = "://" not in text and not text.startswith("sqlite:")  # a local path, as checked: `~` expanded
        return os.path.expanduser(text) if local else text


def uri_scheme(uri: str) -> str:
    """The scheme of a URI, without its driver: `postgresql+psycopg2://…` → postgresql."""
    return uri.split(":", 1)[0].split("+", 1)[0].lower()


def uri_problem(uri: str, schemes: tuple[str, ...]) -> str | None:
    if not uri:
        return "expected a URI or a path, got ''"
    if "://" not in uri and not uri.startswith("sqlite:"):
        problem = path_problem(Path(uri).expanduser(), WRITABLE)
        return None if problem is None else f"{uri} {problem}"
    scheme = uri_scheme(uri)
    if scheme not in schemes:
        return f"{uri}: unknown scheme {scheme!r}: use one of {', '.join(s + '://' for s in schemes)}, or a local path"
    if scheme == "sqlite":
        return sqlite_problem(uri)
    try:
        _ = urlsplit(uri).port  # reading the port checks it
    except ValueError as error:  # what every client of the URI would raise: a bracket left open, a bad port...
        return f"{uri}: {error}: fix the URI"
    return None


def sqlite_problem(uri: str) -> str | None:
    """`sqlite:///relative.db` or `sqlite:////absolute.db`, whose folder exists: SQLAlchemy reads `sqlite://x` as
    the host x with no database, and would create the database anywhere a typo says."""
    if not uri.startswith("sqlite:///") or uri == "sqlite:///":
        return (f"{uri}: a SQLite store is sqlite:///relative/path.db or sqlite:////absolute/path.db (three slashes, "
                "then the file)")
    database = Path(uri.removeprefix("sqlite:///"))
    if database.is_dir():
        return f"{uri}: {database} is a folder: name the database file in it, such as {database / 'mlflow.db'}"
    if not database.parent.is_dir():
        where = "is not a folder" if database.parent.exists() else "does not exist"
        return f"{uri}: the folder {database.parent} {where}: create it first, or fix the path"
    return None


@dataclass(frozen=True)
class Items(Kind):
    """A comma list of `item`s: no empty field (dropping it would shift every later value), each once when
    `unique`; or one of `words` (a λ table's name). `result` makes the value from the parsed items."""

    item: Kind
    unique: bool = True
    words: tuple[str, ...] = ()
    result: Callable[[list], Any] = list
    example: str = field(default="1,2")

    def problem(self, value: Any) -> str | None:
        if value in self.words:
            return None
        if not isinstance(value, list | tuple) or not value:
            return f"must be {' or '.join([*self.words, 'a non-empty list'])}"
        problem = next((problem for problem in map(self.item.problem, value) if problem is not None), None)
        return problem or self.repeated(value)

    def repeated(self, values: list | tuple) -> str | None:
        """The repeat of a `unique` list, as the user reads it."""
        repeated = next((value for i, value in enumerate(values) if value in values[:i]), None)
        if not self.unique or repeated is None:
            return None
        value = shown(repeated) if isinstance(repeated, int | float) else repeated
        return f"lists {value} twice: give each value once"

    def __call__(self, text: str) -> Any:
        if text.strip() in self.words:
            return text.strip()
        if not text.strip():
            refuse(f"expected {' or '.join([*self.words, f'a comma-separated list such as {self.example}'])}, got ''")
        fields = text.split(",")
        empty = [position for position, item in enumerate(fields, start=1) if not item.strip()]
        if empty:
            refuse(f"{text!r} has an empty value at position {empty[0]} of {len(fields)}: give one value per "
                   "comma-separated field")
        values = []
        for position, item in enumerate(fields, start=1):
            try:
                values.append(self.item(item.strip()))
            except argparse.ArgumentTypeError as error:
                if self.words and len(fields) == 1:  # a mistyped word, more likely than a one-value list
                    refuse(f"expected {' or '.join(self.words)} or a comma-separated list such as {self.example}, "
                           f"got {text!r}")
                refuse(f"value {position} of {text!r}: {error}")
        repeated = self.repeated(values)
        if repeated is not None:
            refuse(f"{text!r} {repeated}")
        return self.result(values)


CUDA = re.compile(r"cuda(?::(0|[1-9][0-9]*))?")  # cuda or cuda:N as torch.device reads them: no space, sign or 0N


@dataclass(frozen=True)
class Device(Kind):
    """`auto`, `cpu`, `cuda` or `cuda:N` that this machine has: bf16 autocast and the fused optimizer are used on
    CUDA only, so other torch devices (mps, xla, …) are refused."""

    def problem(self, value: Any) -> str | None:
        """The device's name only: whether this machine has it is checked where the run starts (`device_problem`)."""
        if value in ("auto", "cpu") or isinstance(value, str) and CUDA.fullmatch(value):
            return None
        return "must be auto, cpu, cuda or cuda:N"

    def __call__(self, text: str) -> str:
        problem = device_problem(text.strip())
        if problem is not None:
            refuse(problem)
        return text.strip()


def device_problem(device: str) -> str | None:
    if device in ("auto", "cpu"):
        return None
    cuda = CUDA.fullmatch(device)
    if cuda is None:
        return f"expected auto, cpu, cuda or cuda:N, got {device!r}: the runs train on the CPU or on CUDA only"
    import torch  # only to ask the machine about a CUDA device named: the kinds import no torch

    if not torch.cuda.is_available():
        return f"{device}: this machine has no CUDA device: use --device cpu or auto"
    if cuda[1] is not None and int(cuda[1]) >= torch.cuda.device_count():
        return (f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0: use "
                "--device cuda or auto")
    return None
