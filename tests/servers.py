"""What the tests need for the servers they start (Ray, MLflow, S3): free TCP ports on 127.0.0.1, stopping a
server's process group, and fake MLflow servers that answer wrongly (`fake_server`).

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
import threading
from collections.abc import Callable, Iterator
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


def http_reply(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
            "\r\n").encode() + body


SEARCH_ANSWER = http_reply("200 OK", b'{"experiments": []}')  # MLflow's answer to a search of an empty store
FAILED = http_reply("500 INTERNAL SERVER ERROR", b'{"error_code": "INTERNAL_ERROR", "message": "no such table: '
                                                  b'experiments"}')
NOT_HTTP = b"SSH-2.0-OpenSSH_9.6\r\n"  # what an SSH server says first
TRICKLE = 0.2  # seconds between two bytes of the trickling reply


def trickle(connection: socket.socket, stop: threading.Event) -> None:
    """A reply that never ends, one byte every `TRICKLE` seconds: a status line, then a header that grows (up to
    http.client's 64 KiB, hours away), so that no read waits long enough for its timeout."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: ":
        if stop.wait(TRICKLE):
            return
        connection.sendall(bytes([byte]))
    while not stop.wait(TRICKLE):
        connection.sendall(b".")


# how each fake server answers a request (its bytes up to the blank line): a reply, or a callable that writes to the
# connection until the server stops; None: no reply at all until then
Answer = bytes | Callable[[socket.socket, threading.Event], None] | None
FAKE_SERVERS: dict[str, Callable[[bytes], Answer]] = {
    "never answering": lambda request: None,
    "/health only": lambda request: http_reply("200 OK", b"OK", "text/plain")
    if request.startswith(b"GET /health ") else None,  # the API hangs
    "HTTP 500": lambda request: FAILED,
    "not HTTP": lambda request: NOT_HTTP,
    "very slow": lambda request: trickle,
    "not MLflow": lambda request: http_reply("404 NOT FOUND", b"<h1>Not Found</h1>", "text/html"),
    "hanging up": lambda request: b"",  # the connection closed without a reply
    "a web page": lambda request: http_reply("200 OK", b"<html>a page</html>", "text/html"),
    "asking for credentials": lambda request: http_reply("401 UNAUTHORIZED", b"You are not authenticated.",
                                                         "text/plain"),  # MLflow's basic-auth app, without them
    "answering a search only": lambda request: SEARCH_ANSWER  # then hangs: a store that stops answering
    if request.startswith(b"GET /api/2.0/mlflow/experiments/search?") else None,
}


@contextlib.contextmanager
def fake_server(behaviour: str) -> Iterator[str]:
    """The URL of a server on 127.0.0.1 that answers as `FAKE_SERVERS[behaviour]` says, or where nothing listens
    ("refusing"); it runs in threads of the test process, a thread per connection, until the block ends."""
    if behaviour == "refusing":
        yield f"http://127.0.0.1:{free_port()}"
        return
    answer, stop, connections = FAKE_SERVERS[behaviour], threading.Event(), []

    def serve(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):  # a client that gave up
            request = b""
            while b"\r\n\r\n" not in request and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    request += connection.recv(65536) or b"\r\n\r\n"
            reply = answer(request)
            if reply is None:
                stop.wait()
            elif callable(reply):
                reply(connection, stop)
            else:
                connection.sendall(reply)

    def accept(listener: socket.socket) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                connection = listener.accept()[0]
                connection.settimeout(TRICKLE)
                connections.append(threading.Thread(target=serve, args=(connection,), daemon=True))
                connections[-1].start()

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TRICKLE)  # the accepting thread looks at `stop` this often
        acceptor = threading.Thread(target=accept, args=(listener,), daemon=True)
        acceptor.start()
        try:
            yield f"http://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            stop.set()
            for thread in [acceptor, *connections]:
                thread.join(timeout=5)
