"""What a Ray job writes into its folder is recorded as it is written (`Storage.write_text`, `upload`,
`replace_folder`, `publish_run`), one part of the record per process, on a local disk and on S3 (moto on 127.0.0.1);
the product deletes or replaces only what a part names, unchanged. Generated over every way a job writes and the
user's files of the ownership issue: a folder of the user's, a file added while the job runs, a product file the
user changed, a record edited to name `../x`, an absolute path or a directory. The user's files are byte-identical
after the write and after the job writes again (a retried attempt, a resubmission), and the line names them."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from jumplora import storage as storage_module
from jumplora.errors import JumpLoRAError
from jumplora.results import RunResults
from jumplora.storage import RECORD, Storage
from tests.ray_jobs.conftest import S3_BUCKET, s3_keys, s3_read

STORES = ["local", "s3"]


class Store:
    """A job folder `job` on the store, with the user's side of it written and read without `Storage`."""

    def __init__(self, kind: str, tmp_path: Path, bucket: str | None, prefix: str) -> None:
        self.kind, self.root, self.prefix = kind, tmp_path / "storage", prefix
        self.storage = Storage(str(self.root) if kind == "local" else f"{bucket}/{prefix}")
        self.job = self.storage.child("job")

    def put(self, key: str, data: bytes | None) -> None:
        """The user's file `key` (under the storage), or an empty folder (`data` None)."""
        if self.kind == "local":
            path = self.root / key
            if data is None:
                path.mkdir(parents=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        else:
            boto3.client("s3").put_object(Bucket=S3_BUCKET, Key=f"{self.prefix}/{key}" + ("/" if data is None else ""),
                                          Body=data or b"")

    def tree(self) -> dict[str, bytes]:
        """Every file (and empty folder, as b"") under the storage, but the record's parts."""
        if self.kind == "local":
            found = {path.relative_to(self.root).as_posix(): path.read_bytes() for path in self.root.rglob("*")
                     if path.is_file()}
            found |= {path.relative_to(self.root).as_posix() + "/": b"" for path in self.root.rglob("*")
                      if path.is_dir() and not any(path.iterdir())}
        else:
            found = {key[len(self.prefix) + 1:]: s3_read(key) for key in s3_keys(f"{self.prefix}/")}
        return {key: data for key, data in found.items() if f"/{RECORD}/" not in f"/{key}"}

    def parts(self) -> list[str]:
        return [key for key in self.tree_with_records() if f"/{RECORD}/" in f"/{key}" and key.endswith(".json")]

    def tree_with_records(self) -> list[str]:
        if self.kind == "local":
            return [path.relative_to(self.root).as_posix() for path in self.root.rglob("*") if path.is_file()]
        return [key[len(self.prefix) + 1:] for key in s3_keys(f"{self.prefix}/")]


def checkpoint(tmp_path: Path, text: str) -> Path:
    """A folder as a worker saves a checkpoint: a file at the top and one in a sub-folder."""
    folder = tmp_path / f"checkpoint-{text}"
    (folder / "state").mkdir(parents=True, exist_ok=True)
    (folder / "adapter.safetensors").write_text(f"weights {text}\n")
    (folder / "state" / "records.json").write_text(json.dumps({"records": text}))
    return folder


RESULTS = json.loads((Path(__file__).parents[1] / "run_results.json").read_text())


# every way a job writes into its folder, and the place (under the job's folder) where it writes
def write_manifest(store: Store, tmp_path: Path, attempt: int) -> None:
    store.job.write_json("manifest.json", {"stages": attempt})


def replace_checkpoint(store: Store, tmp_path: Path, attempt: int) -> None:
    store.job.replace_folder(checkpoint(tmp_path, str(attempt)), "task02-lam1")  # a λ's, a test row's


def upload_plots(store: Store, tmp_path: Path, attempt: int) -> None:
    store.job.upload(checkpoint(tmp_path, "plots"), "plots")  # the grid's plots, a merged model


def publish_run(store: Store, tmp_path: Path, attempt: int) -> None:
    store.job.publish_run("run", RunResults.from_json(RESULTS), [])


WRITES = {"write_text": (write_manifest, ""), "replace_folder": (replace_checkpoint, "task02-lam1/"),
          "upload": (upload_plots, "plots/"), "publish_run": (publish_run, "run/")}
DELETES = {"replace_folder"}  # the writes that delete what the product wrote before, and name what they keep

UNRECORDED = {"photos": {"holiday.png": b"jpeg\n", "beach.png": b"jpeg\n"},
              "a report of the user's": {"report.md": b"# my report\n", "report.html": b"<p>mine</p>\n"},
              "an empty sub-folder": {"empty": None},
              "a hidden .X.tmp folder": {".backup.tmp/key.txt": b"secret\n"}}
SHOWN_AS = {"photos": "beach.png", "a report of the user's": "report.md", "an empty sub-folder": "empty/",
            "a hidden .X.tmp folder": ".backup.tmp/key.txt"}
CASES = [*UNRECORDED, "a user file added while the job runs", "a product file the user changed",
         "a record naming ../x", "a record naming an absolute path", "a record naming a directory"]


@pytest.fixture(scope="module")
def bucket(s3_bucket):
    return s3_bucket


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("kind", STORES)
def test_a_job_deletes_and_replaces_only_what_it_recorded_writing(kind, write, case, tmp_path, capsys, request):
    bucket = request.getfixturevalue("bucket") if kind == "s3" else None
    store = Store(kind, tmp_path, bucket, f"{kind}-{write}-{CASES.index(case)}")
    do, place = WRITES[write]
    job = "job/" + place
    if case in UNRECORDED:  # before the job writes there
        for key, data in UNRECORDED[case].items():
            store.put(job + key, data)
    do(store, tmp_path, 1)
    written = store.tree()
    product = sorted(key for key in written if key.startswith(job) and key[len(job):] not in UNRECORDED.get(case, {})
                     and not key.endswith("/"))
    assert product, written
    if case == "a user file added while the job runs":
        store.put(job + "notes.txt", b"the user's notes\n")
    elif case == "a product file the user changed":
        store.put(product[0], b"the user's edit\n")
    elif case.startswith("a record naming"):
        [part] = store.parts()
        data = json.loads(store_read(store, part))
        store.put("x", b"the user's, beside\n")
        if case == "a record naming a directory":
            store.put(job + "notes/todo.txt", b"mine\n")
            data["record"][place + "notes"] = "0" * 64
        else:
            outside = "../x" if case == "a record naming ../x" else str(store.root / "x")
            data["record"][outside] = "0" * 64
        store.put(part, json.dumps(data).encode())
    before = store.tree()
    users = {key: data for key, data in before.items() if key not in product or case.endswith("changed")
             and key == product[0]}
    capsys.readouterr()

    try:  # the job writes again: a retried attempt, a resubmission
        do(store, tmp_path, 2)
        refused = None
    except JumpLoRAError as error:
        refused = str(error)
    err = capsys.readouterr().err
    after = store.tree()
    assert {key: after.get(key) for key in users} == users  # byte-identical, every file of the user's
    if case in ("a product file the user changed", "a record naming ../x", "a record naming an absolute path"):
        # a recorded file changed, or a record that names something outside: what it names is no longer the
        # product's, so the write is refused in one line naming the file, never replacing it
        assert refused is not None and "\n" not in refused and "was not written by jumplora" in refused
        assert refused.startswith(f"{store.job.uri}/{product[0][4:]} "), refused
        assert after == before and not err  # refused before anything is deleted
        return
    assert refused is None
    named = {"a user file added while the job runs": "notes.txt", "a record naming a directory": "notes/todo.txt",
             **SHOWN_AS}[case]
    if write in DELETES:  # it deleted what it wrote before, and kept and named the user's
        assert err.count("\n") == 1 and f"{place}{named}" in err
        assert err.startswith(f"warning: {store.job.uri} keeps ") and "it deleted only its own files" in err


def store_read(store: Store, key: str) -> bytes:
    return (store.root / key).read_bytes() if store.kind == "local" else s3_read(f"{store.prefix}/{key}")


@pytest.mark.parametrize("kind", STORES)
def test_the_record_is_written_as_files_are_one_part_per_process(kind, tmp_path, request, monkeypatch):
    """A part names each file with the SHA-256 of what was written, nothing listed from the folder: a file the user
    put there before is in no part. A second process (another part name) adds its own part; both are read."""
    import hashlib

    bucket = request.getfixturevalue("bucket") if kind == "s3" else None
    store = Store(kind, tmp_path, bucket, f"{kind}-parts")
    store.put("job/mine.txt", b"mine\n")
    store.job.write_text("a.txt", "one\n")
    monkeypatch.setattr(storage_module, "_PART", (storage_module.os.getpid(), "node-2-4242-abcd.json"))
    store.job.replace_folder(checkpoint(tmp_path, "c"), "lam")
    parts = {key.rsplit("/", 1)[1]: json.loads(store_read(store, key)) for key in store.parts()}
    assert len(parts) == 2 and parts["node-2-4242-abcd.json"] == {"aside": [], "record": {
        "lam/adapter.safetensors": hashlib.sha256(b"weights c\n").hexdigest(),
        "lam/state/records.json": hashlib.sha256(json.dumps({"records": "c"}).encode()).hexdigest()}}
    [first] = [part for name, part in parts.items() if name != "node-2-4242-abcd.json"]
    assert first["record"] == {"a.txt": hashlib.sha256(b"one\n").hexdigest()} and first["aside"] == []
    files, aside = store.job.recorded()
    assert sorted(files) == ["a.txt", "lam/adapter.safetensors", "lam/state/records.json"] and aside == set()
    assert store.job.remove("lam") == [] and store.job.remove("a.txt") == []
    assert [key for key in sorted(store.tree()) if key and not key.endswith("/")] == ["job/mine.txt"]


def test_an_aside_name_left_by_a_cut_off_write_is_the_products(tmp_path):
    """A write cut off after its aside name was recorded leaves that name's file: the next write of the name deletes
    it (a user's `.NAME.tmp` is in no record, and is kept)."""
    store = Store("local", tmp_path, None, "")
    store.job.note(aside=(".lam.0a1b2c3d.tmp",))
    store.put("job/.lam.0a1b2c3d.tmp/adapter.safetensors", b"half\n")
    store.put("job/.lam.tmp/key.txt", b"the user's\n")
    store.job.replace_folder(checkpoint(tmp_path, "c"), "lam")
    assert sorted(store.tree()) == ["job/.lam.tmp/key.txt", "job/lam/adapter.safetensors",
                                    "job/lam/state/records.json"]
    assert store.job.recorded()[1] == set()
