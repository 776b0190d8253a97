"""What the tests need for the servers they start (Ray, MLflow, S3): free TCP ports on 127.0.0.1, and stopping a
server's process group.

A port is drawn below the kernel's ephemeral range, where the system hands out the local ports of outgoing
connections: a port taken from that range (binding port 0) is free when drawn, but between that moment and the
server's bind, any connection the starting server itself opens (Ray's processes open dozens) may be given it, and
the server then fails to start. Ray's workers take 10002-19999 by default, so the draw starts above them. Each port
is handed out once per test process."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
from pathlib import Path

FIRST = 20000  # above Ray's default worker ports (--min-worker-port 10002 .. --max-worker-port 19999)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")

handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral range, first and last port (Linux's default when it cannot be read)."""
    try:
        first, last = (int(value) for value in EPHEMERAL.read_text().split())
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on, outside the ephemeral range, not handed out before."""
    first, last = ephemeral_range()
    candidates = [*range(FIRST, first), *range(max(FIRST, last + 1), 65536)]
    draws = random.Random()  # not the tests' seeded global generator: every draw should differ
    for _ in range(1000):
        port = draws.choice(candidates)
        if port in handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        handed_out.add(port)
        return port
    raise AssertionError(f"no free port of 127.0.0.1 from {FIRST} outside the ephemeral range {first}-{last}")


def stop_group(process: subprocess.Popen, grace: float) -> None:
    """Stop the process group `process` leads (started with `start_new_session=True`): SIGTERM, then after `grace`
    seconds SIGKILL to whatever of the group is left, even when its leader already exited."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
