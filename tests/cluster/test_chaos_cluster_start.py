"""The chaos cluster's start survives a port taken by another process between free_port() choosing
it and the broker binding it (it happened in a whole-suite run: the broker exited with "address
already in use" while the port answered, the other process's, and the campaign waited 180 s for a
third broker that was not there)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.cli.local_zookeeper import free_port
from tools.chaos import cluster as chaos_cluster
from tools.chaos.cluster import ChaosCluster


def test_a_broker_whose_port_was_taken_starts_again_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()  # answers connections, as the other process's listener did
    taken = squatter.getsockname()[1]

    def ports() -> Iterator[int]:
        yield taken  # the broker's INTERNAL port, the first it is given
        while True:
            yield free_port()

    chosen = ports()
    monkeypatch.setattr(chaos_cluster, "free_port", lambda: next(chosen))
    cluster = ChaosCluster(tmp_path, brokers=1)
    try:
        cluster.start()
        broker = cluster.brokers[1]
        assert broker.process.running
        assert broker.process.port != taken
        log = (tmp_path / "broker-1.log").read_text()
        assert "address already in use" in log
        assert log.count("strom broker 1 listening on") == 2  # both listeners, on the second start
    finally:
        cluster.stop()
        squatter.close()
