"""One driver per folder on an S3-compatible server (moto) on 127.0.0.1: a lease object, read with boto3. A whole grid
on S3 (everything in the bucket, a resubmission training nothing) is tests/ray_jobs/test_multinode.py's, whose trials
restore from the bucket on another node."""

from __future__ import annotations

import json
import time

import pytest

from jumplora import storage
from jumplora.lock import Holder, LockedError
from jumplora.ownership.checks import OVERWRITE
from jumplora.ownership.folders import Owner, job_digest
from jumplora.storage import Storage
from tests.ray_jobs.conftest import s3_read


def test_an_s3_folder_has_one_driver_by_a_lease_and_an_expired_lease_is_taken_over(s3_bucket, monkeypatch, capsys):
    """No atomic create on an object store: a lease object beside the folder, written, read back after a settling
    wait, renewed by its driver; a second driver is refused naming the holder, an expired lease is taken over."""
    monkeypatch.setattr(storage, "SETTLE_SECONDS", 0.1)
    leases = Storage(f"{s3_bucket}/leases")
    with leases.lock("grid", "grid_lambda.py") as lease:
        assert json.loads(s3_read("leases/.grid.lock")) == json.loads(lease.holder.to_text())
        assert lease.holder.expires > time.time() + storage.LEASE_SECONDS - 60
        with pytest.raises(LockedError, match=rf"^{s3_bucket}/leases/grid is being written by `grid_lambda.py` \("
                                              rf"pid {lease.holder.pid} on "):
            leases.lock("grid", "grid_lambda.py").acquire()
        assert leases.holder("grid") == lease.holder
    assert not leases.exists(".grid.lock") and leases.holder("grid") is None  # released

    stale = Holder("another-node", 4242, "2020-01-01T00:00:00+00:00", "grid_lambda.py", "t0", None, time.time() - 1)
    leases.write_text(".grid.lock", stale.to_text())  # its driver stopped renewing it
    assert leases.holder("grid") is None
    with leases.lock("grid", "grid_lambda.py") as lease:
        assert leases.holder("grid") == lease.holder
    assert capsys.readouterr().err == (f"warning: taking over the lock of {s3_bucket}/leases/grid from "
                                       f"{stale.describe()}, whose lease expired\n")


S3_USER_FOLDERS = {  # a folder of the user's in the bucket, whatever its objects are called; what the line names
    "photos": ({"holiday.png": b"jpeg", "beach.png": b"jpeg"}, "beach.png"),
    "a report of the user's": ({"report.md": b"# mine"}, "report.md"),
    "an empty sub-folder": ({"empty/": b""}, "empty/"),
    "a hidden .X.tmp folder": ({".backup.tmp/key.txt": b"secret"}, ".backup.tmp/key.txt"),
    "a job's marker with a file of the user's beside": ({"manifest.json": b"{}"}, None),
}


@pytest.mark.parametrize("case", list(S3_USER_FOLDERS))
def test_a_job_folder_on_s3_of_the_users_objects_is_refused_naming_them_and_left_as_it_was(s3_bucket, case,
                                                                                          tmp_path):
    """`--storage-path s3://… --name N` over objects the product did not write (no marker): refused in one line
    naming them, never asking for `--overwrite`; every object byte-identical. A job's marker of another configuration:
    refused too (a job's folder is resumed by its own job only)."""
    import boto3

    from jumplora import ownership
    from jumplora.errors import JumpLoRAError
    from tests.ray_jobs.conftest import S3_BUCKET, s3_keys

    prefix = f"user-{list(S3_USER_FOLDERS).index(case)}"
    objects, named = S3_USER_FOLDERS[case]
    if named is None:
        marker = Owner(storage.GRID.name, storage.GRID.name, files=None, job=job_digest({"o": 1}))
        objects = {**objects, ownership.MARKER: marker.text().encode()}
    client = boto3.client("s3")
    for key, data in objects.items():
        client.put_object(Bucket=S3_BUCKET, Key=f"{prefix}/{key}", Body=data)
    before = {key: s3_read(key) for key in s3_keys(prefix)}
    with pytest.raises(JumpLoRAError) as refused:
        Storage(s3_bucket).job(prefix, storage.GRID, str(tmp_path / "cache"), {"run": {"seed": 1}})
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--storage-path/--name {s3_bucket}/{prefix} ")
    assert (named or "of another configuration") in line and OVERWRITE not in line
    assert {key: s3_read(key) for key in s3_keys(prefix)} == before
