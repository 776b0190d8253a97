"""Where the jobs keep their state: a local directory or a URI (`s3://…`, `gs://…`), through pyarrow's file
systems, as Ray does; one driver per folder, marked as its job's, what the product writes recorded as it is written
(`docs/DECISIONS.md`, "Who uses it" and "Object stores: a lease")."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs

from jumplora import ownership
from jumplora.errors import JumpLoRAError
from jumplora.lock import DirectoryLock, Holder, LockedError, refusal, warn_take_over
from jumplora.ownership.checks import shown
from jumplora.ownership.folders import is_record, sha256_of, under
from jumplora.ownership.target import aside_name, aside_target
from jumplora.results import Needs, RunResults, parse_json

LEASE_SECONDS = 300.0  # a lease not renewed for this long is stale: its driver is gone
RENEW_SECONDS = 60.0
SETTLE_SECONDS = 2.0  # between writing a lease and reading it back: a driver that wrote at the same time shows
NAME_HINT = "pass another --name"
RUN_DIR = "run"  # the final `jumplora` run directory of a job, under its folder (`publish_run`)
MANIFEST = "manifest.json"  # a grid's stages (`ray_jobs.manifest.Manifest`)
SELECT = "select"  # its job's key of a λ rule other than `best` (`jumplora.selection`; a grid from before: `best`)
JOB_FILE = "job.json"  # a train_sequence.py job's identity (`ray_jobs.jobs.claim`)
RECORD = ".jumplora-record"  # in a folder the product writes into: its record, a part per process (`Storage.note`)

# a job's folder is shared with Ray, which writes its own files there: marked with the job's digest, no record
GRID = ownership.Kind("grid_lambda.py", "a grid_lambda.py folder", records=False)
SEQUENCE = ownership.Kind("train_sequence.py", "a train_sequence.py folder", records=False)
SWEEP = ownership.Kind("reproduce.py", "a reproduce.py folder", records=False)
ownership.register(GRID, SEQUENCE, SWEEP)


def is_uri(location: str) -> bool:
    return "://" in location


PARTS: dict[tuple[str, str, str], dict] = {}  # this process's part of each folder's record: (part, file system, path)
PARTS_LOCK = threading.Lock()
_PART: tuple[int, str] | None = None


def process_part() -> str:
    """The name of this process's part of a record: host, pid and a random token, so that processes on several nodes
    write their own parts of one folder's record without a lock."""
    global _PART
    if _PART is None or _PART[0] != os.getpid():
        _PART = (os.getpid(), f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}.json")
    return _PART[1]


def tree_files(local_dir: Path, name: str) -> dict[str, Path]:
    """The files of the folder `local_dir` by the names they take under `name`."""
    return {f"{name}/{path.relative_to(local_dir).as_posix()}": path for path in sorted(local_dir.rglob("*"))
            if path.is_file()}


class Storage:
    """A folder of the storage: `uri` is what Ray's `storage_path` takes (a plain path made absolute, so that workers
    on this node write to the same place); paths below it are `/`-joined."""

    def __init__(self, location: str) -> None:
        self.uri = location.rstrip("/") if is_uri(location) else str(Path(location).expanduser().resolve())
        self.fs, self.path = pyarrow.fs.FileSystem.from_uri(self.uri) if is_uri(self.uri) \
            else (pyarrow.fs.LocalFileSystem(), self.uri)

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

    @property
    def has_folders(self) -> bool:
        """A file system of folders and renames (a local path, `file://`), not an object store."""
        return isinstance(self.fs, pyarrow.fs.LocalFileSystem)

    def child(self, name: str) -> Storage:
        return Storage(f"{self.uri}/{name}")

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(f"{self.path}/{name}").type != pyarrow.fs.FileType.NotFound

    def read_json(self, name: str) -> dict:
        with self.fs.open_input_stream(f"{self.path}/{name}") as stream:
            return json.loads(stream.read().decode())

    def read_results(self, needs: Needs | None = None) -> RunResults:
        """The `results.json` of the run directory this folder is (`RunResults.from_json`: the grid's, the sweep's
        and the sequence's readers read a run through the one schema `jumplora report` reads it with)."""
        from jumplora.outputs import RESULTS  # torch: loaded where a run is read or written, not by a refusal

        source = f"{self.uri}/{RESULTS}"
        with self.fs.open_input_stream(f"{self.path}/{RESULTS}") as stream:
            return RunResults.from_json(parse_json(stream.read(), source), source, needs)

    def write_json(self, name: str, data: dict) -> None:
        self.write_text(name, json.dumps(data, indent=1))

    def write_text(self, name: str, text: str) -> None:
        """`name` holds `text`, recorded (atomic on a local disk: written aside under a recorded unique name, then
        renamed; an object store puts an object whole). A file there that the product did not write, or that changed
        since, is refused, never replaced."""
        data = text.encode()
        self.may_replace(self.recorded()[0], [name])
        if not self.has_folders:  # an object store has no folders: an object is put whole, or not at all
            self.note({name: hashlib.sha256(data).hexdigest()})  # before it is put
            self.put(name, data)
            return
        Path(self.path, name).parent.mkdir(parents=True, exist_ok=True)
        tmp = aside_name(name)
        self.note(aside=(tmp,))
        self.put(tmp, data)
        os.replace(f"{self.path}/{tmp}", f"{self.path}/{name}")
        self.note({name: hashlib.sha256(data).hexdigest()}, done=(tmp,))

    def put(self, name: str, data: bytes) -> None:
        """Write the file `name`, unrecorded: a lease (`Lease`), a part of the record, a recorded aside name."""
        with self.fs.open_output_stream(f"{self.path}/{name}") as stream:
            stream.write(data)

    def upload(self, local_dir: Path, name: str) -> None:
        """Put the files of the folder `local_dir` under `name`, each recorded, over those the product wrote there (a
        file of the user's, or one changed, at a path it writes is refused, never replaced). On a local disk the folder
        is copied aside under a recorded unique name, then its files renamed into place."""
        files = tree_files(local_dir, name)
        digests = {target: sha256_of(path) for target, path in files.items()}
        self.may_replace(self.recorded()[0], list(files))
        if not self.has_folders:
            self.note(digests)  # before: each object is put whole or not at all
            pyarrow.fs.copy_files(str(local_dir), f"{self.path}/{name}", destination_filesystem=self.fs)
            return
        tmp = aside_name(name)
        self.note(aside=(tmp,))
        shutil.copytree(local_dir, Path(self.path) / tmp)
        for target, path in files.items():
            (Path(self.path) / target).parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(self.path) / tmp / path.relative_to(local_dir), Path(self.path) / target)
        shutil.rmtree(Path(self.path) / tmp)
        self.note(digests, done=(tmp,))

    def replace_folder(self, local_dir: Path, name: str) -> None:
        """The folder `name` holds `local_dir`'s files in place of what the product wrote there before (`remove`:
        what an interrupted attempt left); a file of the user's there is kept and named, one in the way refused
        before anything is deleted."""
        recorded = self.recorded()
        self.may_replace(recorded[0], list(tree_files(local_dir, name)))
        self.remove(name, recorded)
        self.upload(local_dir, name)

    # --- the record: what the product wrote here (`RECORD`, a part per process), and what it may delete

    def recorded(self) -> tuple[dict[str, set[str]], set[str]]:
        """Every part of this folder's record, joined: each file the product wrote here with the SHA-256s it wrote it
        with, and the names it wrote aside. A part that is not the product's (unreadable, or naming a path outside the
        folder: `../x`, `/etc/x`) names nothing."""
        files: dict[str, set[str]] = {}
        aside: set[str] = set()
        for part in sorted(self.names(RECORD) or ()):
            data = self.read_part(part)
            for name, digest in data["record"].items():
                files.setdefault(name, set()).add(digest)
            aside.update(data["aside"])
        return files, aside

    def note(self, files: dict[str, str | None] | None = None, aside: tuple[str, ...] = (),
             done: tuple[str, ...] = ()) -> None:
        """This process's part of the record: `files` recorded (None: dropped), the aside names `aside` added, `done`
        dropped; written whole (one writer per part: this process)."""
        with PARTS_LOCK:
            key = (process_part(), self.fs.type_name, self.path)
            if key not in PARTS:  # what this process wrote here before (a part it wrote is its own)
                PARTS[key] = self.read_part(process_part())
            part = PARTS[key]
            for name, digest in (files or {}).items():
                if digest is None:
                    part["record"].pop(name, None)
                else:
                    part["record"][name] = digest
            part["aside"] = sorted({*part["aside"], *aside} - set(done))
            if self.has_folders:
                Path(self.path, RECORD).mkdir(parents=True, exist_ok=True)
            self.put(f"{RECORD}/{process_part()}", json.dumps(part, indent=0, sort_keys=True).encode())

    def read_part(self, part: str) -> dict:
        """The part `part` of this folder's record as written, or an empty one (none, or not the product's)."""
        try:
            data = json.loads(self.read_text(f"{RECORD}/{part}") or "")
            if is_record(data["record"], data["aside"]):
                return {"record": data["record"], "aside": data["aside"]}
        except (ValueError, TypeError, KeyError):
            pass
        return {"record": {}, "aside": []}

    def sha256(self, name: str) -> str | None:
        """The SHA-256 of the file `name`, or None when it is not a file (a folder, a link, nothing)."""
        if self.has_folders:
            return sha256_of(Path(self.path) / name)
        info = self.fs.get_file_info(f"{self.path}/{name}")
        if info.type != pyarrow.fs.FileType.File:
            return None
        digest = hashlib.sha256()
        with self.fs.open_input_stream(info.path) as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def may_replace(self, recorded: dict[str, set[str]], names: list[str]) -> None:
        """Refuse to put a file at any of `names` over one the product did not write, or changed since."""
        for name in names:
            if (self.exists(name) or self.has_folders and Path(self.path, name).is_symlink()) \
                    and self.sha256(name) not in recorded.get(name, ()):
                raise JumpLoRAError(f"{self.uri}/{name} was not written by jumplora, or changed since it was: "
                                    "jumplora does not replace it; move it out and run again")

    def remove(self, name: str, recorded: tuple[dict[str, set[str]], set[str]] | None = None) -> list[str]:
        """Delete what the record names at or under `name` whose content is unchanged, what lies under its aside names
        for it, then (on a local disk) the folders there left empty; what it keeps (not recorded, changed, what Ray
        wrote) is returned and named in one line."""
        files, aside = recorded or self.recorded()  # `recorded`: read just before by the caller
        deleted = [file for file in files if under(file, (name,)) and self.sha256(file) in files[file]]
        for file in deleted:
            self.fs.delete_file(f"{self.path}/{file}")
        cleared = [tmp for tmp in aside if under(aside_target(tmp), (name,))]
        for tmp in cleared:
            self.delete_path(tmp)
        # the folders the deleted files were in, up to `name`, deepest first, when nothing else is left there
        above = {"/".join(file.split("/")[:depth]) for file in deleted for depth in range(1, file.count("/") + 1)}
        for folder in sorted((folder for folder in above if under(folder, (name,))), key=len, reverse=True):
            if self.names(folder) == set():
                self.fs.delete_dir(f"{self.path}/{folder}")
        if deleted or cleared:
            self.note(dict.fromkeys(deleted), done=tuple(cleared))
        kept = [f"{name}/{file}" for file in self.child(name).files() if not under(file, (RECORD,))] \
            if self.child(name).names() is not None else [name] if self.exists(name) else []
        if kept:
            print(f"warning: {self.uri} keeps {shown(kept)}, which jumplora did not write or which changed "
                  "since it wrote them: it deleted only its own files", file=sys.stderr)
        return kept

    def delete_path(self, name: str) -> None:
        """Remove the folder or file `name` if it exists: only a name the product recorded before it made it (an
        aside name, a lease of its own)."""
        info = self.fs.get_file_info(f"{self.path}/{name}")
        if info.type == pyarrow.fs.FileType.Directory:
            self.fs.delete_dir(info.path)
        elif info.type == pyarrow.fs.FileType.File:
            self.fs.delete_file(info.path)

    def lock(self, name: str, command: str) -> DirectoryLock | Lease:
        """The one-driver lock of the folder `name`, to hold with `with`: a second driver is refused with one line
        naming the holder; a lock whose driver is gone is taken over with a warning."""
        if self.is_local:
            return DirectoryLock(Path(self.path) / name, command, NAME_HINT)
        return Lease(self, name, command)

    def holder(self, name: str) -> Holder | None:
        """The driver that holds the folder `name` now, or None when none does (no lock, or its driver is gone)."""
        try:
            found = self.lock(name, "").read()
        except LockedError:  # a local lock being taken over
            return None
        stale = found is None or found.is_gone() is True or not self.is_local and Lease.is_stale(found)
        return None if stale else found

    def check_writable(self) -> None:
        """Local paths only (a URI is checked by Ray when the run starts)."""
        if not self.is_local:
            return
        try:
            Path(self.path).mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-check-"):
                pass
        except OSError as error:
            raise JumpLoRAError(f"storage path {self.path} is not writable ({error.strerror or error}): "
                                "pass --storage-path with a writable directory or a URI") from None

    def names(self, sub: str = "") -> set[str] | None:
        """`ownership.Folder`: the entries of this folder (or of `sub` in it); None when it is not a folder."""
        where = f"{self.path}/{sub}" if sub else self.path
        if self.fs.get_file_info(where).type != pyarrow.fs.FileType.Directory:
            return None
        return {info.base_name for info in self.fs.get_file_info(pyarrow.fs.FileSelector(where))}

    def read_text(self, name: str) -> str | None:
        """`ownership.Folder`: the text of the file `name`, or None."""
        try:
            with self.fs.open_input_stream(f"{self.path}/{name}") as stream:
                return stream.read().decode()
        except (OSError, UnicodeDecodeError):
            return None

    def files(self) -> list[str]:
        """`ownership.Folder`: every file under this folder, relative to it, and each empty folder (`name/`)."""
        selector = pyarrow.fs.FileSelector(self.path, recursive=True, allow_not_found=True)
        found = {info.path[len(self.path) + 1:]: info.type for info in self.fs.get_file_info(selector)}
        empty = [f"{name}/" for name, kind in found.items() if kind == pyarrow.fs.FileType.Directory
                 and not any(other.startswith(f"{name}/") for other in found)]  # something of the user's too
        return sorted([name for name, kind in found.items() if kind == pyarrow.fs.FileType.File] + empty)

    def job(self, name: str, kind: ownership.Kind, cache_dir: str, identity: dict) -> JobFolder:
        """The folder `name` of the job of configuration `identity` and entry script `kind`, checked before any work:
        new, empty, or of `kind` marked by this very job; with its `--cache-dir`, lying apart. Writes nothing
        (`JobFolder.held` does, once the job's requests are known to fit, so a refused job leaves no folder; a cache is
        known by its entries: `ownership.CACHE`)."""
        if self.is_local:  # before `child`, which resolves a link
            ownership.refuse_link(Path(self.path) / name, "--storage-path/--name")
        folder = self.child(name)
        if self.exists(name) and folder.names() is None:
            raise JumpLoRAError(f"--storage-path/--name {folder.uri} is a file: pass another --name")
        ownership.check_job(folder, f"--storage-path/--name {folder.uri}", kind, identity, cache_dir,
                            Path(folder.path) if self.is_local else None)
        if folder.exists(ownership.MARKER) and folder.sha256(ownership.MARKER) not in \
                folder.recorded()[0].get(ownership.MARKER, ()):  # the job's files are in no record: none is rewritten
            raise JumpLoRAError(f"--storage-path/--name {folder.uri} holds {kind.what} that a version of jumplora "
                                "before records wrote (or whose marker changed since): `jumplora report` and "
                                "`jumplora track` read it, but a job does not resume or rewrite it; pass another "
                                "--name")
        return JobFolder(self, name, kind, identity)

    def publish_run(self, name: str, results: RunResults, updates: list) -> None:
        """A `jumplora` run directory under `name`, as `outputs.write_run` writes it (updates, summary, CSV, plots),
        written locally, uploaded, then `results.json` last: its presence means the run is complete."""
        from jumplora.outputs import RESULTS, write_run

        with tempfile.TemporaryDirectory() as local:
            write_run(Path(local), results, updates)
            (Path(local) / RESULTS).unlink()
            self.upload(Path(local), name)
        self.write_json(f"{name}/{RESULTS}", results.to_json())


@dataclasses.dataclass(frozen=True)
class JobFolder:
    """A Ray job's folder `storage/name` (checked: `Storage.job`), held with `with job.held() as folder:` by one driver
    at a time (`Storage.lock`) and marked as the job's (`kind`, the digest of `identity`); what the job writes there
    is recorded as it is written (`Storage.write_text`, `Storage.upload`)."""

    storage: Storage
    name: str
    kind: ownership.Kind
    identity: dict

    @contextlib.contextmanager
    def held(self) -> Iterator[Storage]:
        with self.storage.lock(self.name, self.kind.name):
            folder = self.storage.child(self.name)
            if not folder.exists(ownership.MARKER):  # one marked before digests were kept stays so (its job unknown)
                folder.write_text(ownership.MARKER, ownership.job_marker(self.kind, self.identity))
            yield folder


def earlier_folders(fs: pyarrow.fs.FileSystem, path: str, prefix: str) -> list[str]:
    """The paths of the folders beside `path` whose names start with `prefix` and sort before its own, last first (Ray
    names its checkpoints in time order: `checkpoint_000003`, or `checkpoint_<date>_<time>` in Ray Train)."""
    folder, name = path.rstrip("/").rsplit("/", 1)
    found = fs.get_file_info(pyarrow.fs.FileSelector(folder))
    names = sorted((info.base_name for info in found if info.type == pyarrow.fs.FileType.Directory
                    and info.base_name.startswith(prefix) and info.base_name < name), reverse=True)
    return [f"{folder}/{other}" for other in names]


class Lease:
    """A lease object `.<name>.lock` beside the folder `name` of a URI storage: its driver (`Holder`) and an expiry,
    renewed every `RENEW_SECONDS` from a thread; written, read back after `SETTLE_SECONDS` (an object store has no
    atomic create), taken over with a warning once stale (DECISIONS, "Object stores: a lease")."""

    def __init__(self, storage: Storage, name: str, command: str) -> None:
        self.storage, self.command = storage, command
        self.object = f".{name}.lock"
        self.where, self.uri = storage.child(name).uri, f"{storage.uri}/{self.object}"
        self.holder: Holder | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @staticmethod
    def is_stale(holder: Holder) -> bool:
        return holder.expires is None or holder.expires < time.time() or holder.is_gone() is True

    def read(self) -> Holder | None:
        if not self.storage.exists(self.object):
            return None
        with contextlib.suppress(FileNotFoundError), \
                self.storage.fs.open_input_stream(f"{self.storage.path}/{self.object}") as stream:
            return Holder.from_text(stream.read().decode())
        return None

    def acquire(self) -> None:
        found = self.read()
        if found is not None and not self.is_stale(found):
            raise refusal(self.where, found, NAME_HINT, self.uri)
        if found is not None:
            warn_take_over(self.where, found, "whose lease expired" if found.is_gone() is not True
                           else "which is no longer running")
        mine = Holder.this_process(self.command, expires=time.time() + LEASE_SECONDS)
        self.storage.put(self.object, mine.to_text().encode())
        time.sleep(SETTLE_SECONDS)
        back = self.read()
        if back is None:
            raise LockedError(f"{self.where}: its lease {self.uri} vanished while taken: try again")
        if back.token != mine.token:
            raise refusal(self.where, back, NAME_HINT, self.uri)
        self.holder = mine
        self._renewer = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                current = self.read()
                if current is None or current.token != self.holder.token:
                    print(f"warning: the lease of {self.where} was taken by "
                          f"{current.describe() if current else 'nobody'}: two drivers may now write it",
                          file=sys.stderr)
                    return
                self.holder = dataclasses.replace(self.holder, expires=time.time() + LEASE_SECONDS)
                self.storage.put(self.object, self.holder.to_text().encode())
            except Exception as error:  # noqa: BLE001 - a failed renewal is retried; the lease lasts LEASE_SECONDS
                print(f"warning: renewing the lease {self.uri} failed ({error}); retrying", file=sys.stderr)

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.holder is not None:
            current = self.read()
            if current is not None and current.token == self.holder.token:
                self.storage.delete_path(self.object)
        self.holder = None

