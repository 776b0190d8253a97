"""Where the jobs keep their state: a local directory or a URI (`s3://…`, `gs://…`), through pyarrow's file
systems, as Ray does. Plain paths are made absolute, so workers on this node write to the same place."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow.fs

from jumplora.errors import JumpLoRAError
from jumplora.outputs import RESULTS, write_run


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

    def write_json(self, name: str, data: dict) -> None:
        self.write_text(name, json.dumps(data, indent=1))

    def write_text(self, name: str, text: str) -> None:
        """Atomic on a local disk (written aside, then renamed); object stores replace objects whole."""
        self.fs.create_dir(self.path, recursive=True)
        target = f"{self.path}/{name}"
        staging = f"{self.path}/.{name}.tmp" if self.is_local else target
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

    def publish_run(self, name: str, results: dict, updates: list) -> None:
        """A `jumplora` run directory under `name`, as `outputs.write_run` writes it (updates, summary, CSV, plots),
        written locally, uploaded, then `results.json` last: its presence means the run is complete."""
        with tempfile.TemporaryDirectory() as local:
            write_run(Path(local), results, updates)
            (Path(local) / RESULTS).unlink()
            self.upload(Path(local), name)
        self.child(name).write_json(RESULTS, results)
