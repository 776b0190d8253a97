"""Where the jobs keep their state: a local directory or a URI (`s3://…`, `gs://…`), through pyarrow's file
systems, as Ray does. Plain paths are made absolute, so workers on this node write to the same place.

One driver per folder (`Storage.lock`): on a local path the lock file of `jumplora.lock`; on a URI a lease object
(`Lease`), because an object store has no atomic create. A job writes only a folder of its own kind
(`Storage.check_own`, `jumplora.ownership`): each entry script's folder is marked as written by it, with the digest
of the job's configuration. A job's folder is never replaced: the same job resumes it (a finished one trains and
rewrites nothing), another job is refused up front."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.fs

from jumplora import ownership
from jumplora.errors import JumpLoRAError
from jumplora.lock import DirectoryLock, Holder, LockedError, lock_path, refusal, warn_take_over
from jumplora.ownership.target import aside_name
from jumplora.results import Needs, RunResults, parse_json

LEASE_SECONDS = 300.0  # a lease not renewed for this long is stale: its driver is gone
RENEW_SECONDS = 60.0
SETTLE_SECONDS = 2.0  # between writing a lease and reading it back: a driver that wrote at the same time shows
NAME_HINT = "pass another --name"
RUN_DIR = "run"  # the final `jumplora` run directory of a job, under its folder (`publish_run`)
MANIFEST = "manifest.json"  # a grid's stages (`ray_jobs.manifest.Manifest`)
SELECT = "select"  # its job's key of a λ rule other than `best` (`jumplora.selection`; a grid from before: `best`)
JOB_FILE = "job.json"  # a train_sequence.py job's identity (`ray_jobs.jobs.claim`)

# a job's folder is shared with Ray, which writes its own files there: marked with the job's digest, no record
GRID = ownership.Kind("grid_lambda.py", "a grid_lambda.py folder", records=False)
SEQUENCE = ownership.Kind("train_sequence.py", "a train_sequence.py folder", records=False)
SWEEP = ownership.Kind("reproduce.py", "a reproduce.py folder", records=False)
ownership.register(GRID, SEQUENCE, SWEEP)


def is_uri(location: str) -> bool:
    return "://" in location


class Storage:
    """A folder of the storage: `uri` is what Ray's `storage_path` takes; paths below it are `/`-joined."""

    def __init__(self, location: str) -> None:
        self.uri = location.rstrip("/") if is_uri(location) else str(Path(location).expanduser().resolve())
        if is_uri(self.uri):
            self.fs, self.path = pyarrow.fs.FileSystem.from_uri(self.uri)
        else:
            self.fs, self.path = pyarrow.fs.LocalFileSystem(), self.uri

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

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
        """Atomic on a local disk (written aside, then renamed); object stores replace objects whole."""
        self.fs.create_dir(self.path, recursive=True)
        target = f"{self.path}/{name}"
        staging = f"{self.path}/{aside_name(name)}" if self.is_local else target  # a unique name: no one else's
        with self.fs.open_output_stream(staging) as stream:
            stream.write(text.encode())
        if staging != target:
            os.replace(staging, target)

    def delete(self, name: str) -> None:
        """Remove the folder or file `name` if it exists."""
        info = self.fs.get_file_info(f"{self.path}/{name}")
        if info.type == pyarrow.fs.FileType.Directory:
            self.fs.delete_dir(info.path)
        elif info.type == pyarrow.fs.FileType.File:
            self.fs.delete_file(info.path)

    def upload(self, local_dir: Path, name: str) -> None:
        self.fs.create_dir(f"{self.path}/{name}", recursive=True)
        pyarrow.fs.copy_files(str(local_dir), f"{self.path}/{name}", destination_filesystem=self.fs)

    def lock(self, name: str, command: str) -> DirectoryLock | Lease:
        """The one-driver lock of the folder `name`, to hold with `with`: a second driver is refused with one line
        naming the holder; a lock whose driver is gone is taken over with a warning."""
        if self.is_local:
            return DirectoryLock(Path(self.path) / name, command, NAME_HINT)
        return Lease(self, name, command)

    def holder(self, name: str) -> Holder | None:
        """The driver that holds the folder `name` now, or None when none does (no lock, or its driver is gone)."""
        if self.is_local:
            lock = DirectoryLock(Path(self.path) / name, "", NAME_HINT)
            try:
                found = lock.read()
            except LockedError:
                return None
            return found if found is not None and found.is_gone() is not True else None
        found = Lease(self, name, "").read()
        return found if found is not None and not Lease.is_stale(found) else None

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

    def check_own(self, name: str, kind: ownership.Kind, cache_dir: str, identity: dict) -> None:
        """Check, before any work, that the job of configuration `identity` may write its folder `name` (new,
        empty, or of `kind`, the entry script's name, marked by this very job) and its `--cache-dir`, and that they
        lie apart. Writes nothing: `mark` does, once the job's requests are known to fit, so a refused job leaves no
        folder (a cache is known by its entries: `ownership.CACHE`)."""
        if self.is_local:  # before `child`, which resolves a link
            ownership.refuse_link(Path(self.path) / name, "--storage-path/--name")
        folder = self.child(name)
        where = f"--storage-path/--name {folder.uri}"
        if self.exists(name) and folder.names() is None:
            raise JumpLoRAError(f"{where} is a file: pass another --name")
        problem = ownership.refusal(folder, kind, where) or \
            (ownership.enclosing(Path(folder.path), kind, where) if self.is_local else None)
        if problem is not None:
            raise JumpLoRAError(problem)
        marker = ownership.read_owner(folder)
        if marker is not None and marker.job not in (None, ownership.job_digest(identity)):
            # marked before digests were kept (None): the script's own record refuses another job (manifest, job.json)
            raise JumpLoRAError(f"{where} holds {kind.what} of another configuration (written by `{marker.command}`): "
                                "a job's folder is resumed by the same job only, never replaced; pass another --name")
        ownership.check(Path(cache_dir), ownership.CACHE, "--cache-dir")
        if self.is_local:
            ownership.check_lock_file(lock_path(Path(folder.path)), "--name", Path(folder.path))
            ownership.check_apart([("--storage-path/--name", folder.path), ("--cache-dir", cache_dir)])

    def mark(self, name: str, kind: ownership.Kind, identity: dict) -> None:
        """Mark the folder `name` as the job's, of configuration `identity` (`check_own` first)."""
        folder = self.child(name)
        if not folder.exists(ownership.MARKER):  # one marked before digests were kept stays so (its job unknown)
            folder.write_text(ownership.MARKER, ownership.Owner(kind.name, kind.name, files=None,
                                                                job=ownership.job_digest(identity)).text())

    def publish_run(self, name: str, results: RunResults, updates: list) -> None:
        """A `jumplora` run directory under `name`, as `outputs.write_run` writes it (updates, summary, CSV, plots),
        written locally, uploaded, then `results.json` last: its presence means the run is complete."""
        from jumplora.outputs import RESULTS, write_run

        with tempfile.TemporaryDirectory() as local:
            write_run(Path(local), results, updates)
            (Path(local) / RESULTS).unlink()
            self.upload(Path(local), name)
        self.child(name).write_json(RESULTS, results.to_json())


def earlier_folders(fs: pyarrow.fs.FileSystem, path: str, prefix: str) -> list[str]:
    """The paths of the folders beside `path` whose names start with `prefix` and sort before its own, last first (Ray
    names its checkpoints in time order: `checkpoint_000003`, or `checkpoint_<date>_<time>` in Ray Train)."""
    folder, name = path.rstrip("/").rsplit("/", 1)
    found = fs.get_file_info(pyarrow.fs.FileSelector(folder))
    names = sorted((info.base_name for info in found if info.type == pyarrow.fs.FileType.Directory
                    and info.base_name.startswith(prefix) and info.base_name < name), reverse=True)
    return [f"{folder}/{other}" for other in names]


class Lease:
    """A lease object `.<name>.lock` beside the folder `name` of a URI storage, holding its driver (`Holder`) and an
    expiry that the driver renews every `RENEW_SECONDS` from a thread. An object store has no atomic create, so a
    driver writes its lease, waits `SETTLE_SECONDS` and reads it back: of two drivers that wrote at once the later
    write stays, and the other driver is refused. A lease not renewed for `LEASE_SECONDS` (or of a dead process of
    this host) is taken over with a warning."""

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
        self.storage.write_text(self.object, mine.to_text())
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
                self.storage.write_text(self.object, self.holder.to_text())
            except Exception as error:  # noqa: BLE001 - a failed renewal is retried; the lease lasts LEASE_SECONDS
                print(f"warning: renewing the lease {self.uri} failed ({error}); retrying", file=sys.stderr)

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.holder is not None:
            current = self.read()
            if current is not None and current.token == self.holder.token:
                self.storage.delete(self.object)
        self.holder = None

