import socket

from tests import servers


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    first, last = servers.ephemeral_range()
    drawn = [servers.free_port() for _ in range(50)]
    assert len(set(drawn)) == 50
    assert all(servers.FIRST <= port <= 65535 and not first <= port <= last for port in drawn)
    with socket.socket() as server:
        server.bind(("127.0.0.1", drawn[0]))  # free when drawn
