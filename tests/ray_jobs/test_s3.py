"""One driver per folder on an S3-compatible server (moto) on 127.0.0.1: a lease object, read with boto3. A whole grid
on S3 (everything in the bucket, a resubmission training nothing) is tests/ray_jobs/test_multinode.py's, whose trials
restore from the bucket on another node."""

from __future__ import annotations

import json
import time

import pytest

from jumplora import storage
from jumplora.lock import Holder, LockedError
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
