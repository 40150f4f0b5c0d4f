"""Cluster settings under Kafka's names and defaults, and the ZooKeeper connect string.

The broker's configuration table (``strom.broker.config``) will declare these keys; the values
arrive here as plain fields so the pure cores never parse properties themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ZOOKEEPER_PORT = 2181


@dataclass(frozen=True)
class ControllerConfig:
    # unclean.leader.election.enable: elect a replica outside the ISR when no ISR member is alive
    # (availability over durability). Off by default, as in Kafka since 0.11; a topic may override.
    unclean_leader_election_enable: bool = False
    # auto.leader.rebalance.enable / leader.imbalance.check.interval.seconds /
    # leader.imbalance.per.broker.percentage: move leadership back to preferred replicas when more
    # than this share of a broker's preferred partitions are led elsewhere.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10


@dataclass(frozen=True)
class ReplicationConfig:
    # replica.lag.time.max.ms: a follower that has not caught up with the leader's log end for this
    # long leaves the ISR.
    replica_lag_time_max_ms: int = 30_000
    # min.insync.replicas (topic-level): acks=all needs at least this many in-sync replicas.
    min_insync_replicas: int = 1
    # replica.fetch.wait.max.ms / replica.fetch.min.bytes / replica.fetch.max.bytes /
    # replica.fetch.response.max.bytes: the followers' long-polling fetch.
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760


class ZooKeeperConnectError(ValueError):
    """The connect string does not parse; the message says what is wrong with it."""


@dataclass(frozen=True)
class ZooKeeperConnect:
    """``HOST:PORT[,HOST:PORT...][/chroot]``: the servers of one ensemble and an optional chroot."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str | None = None

    @classmethod
    def parse(cls, text: str) -> ZooKeeperConnect:
        raw = text.strip()
        if not raw:
            raise ZooKeeperConnectError("the ZooKeeper connect string is empty (expected HOST:PORT[/chroot])")
        servers, slash, chroot = raw.partition("/")
        chroot_path: str | None = None
        if slash:
            chroot_path = "/" + chroot.rstrip("/")
            if chroot_path == "/":
                chroot_path = None
            elif "//" in chroot_path or any(part in (".", "..") for part in chroot_path.split("/")[1:]):
                raise ZooKeeperConnectError(f"chroot {chroot_path!r} is not a valid ZooKeeper path")
        hosts: list[tuple[str, int]] = []
        for server in servers.split(","):
            server = server.strip()
            if not server:
                raise ZooKeeperConnectError(f"empty server in {text!r}")
            host, colon, port_text = server.rpartition(":")
            if not colon:
                host, port_text = server, str(DEFAULT_ZOOKEEPER_PORT)
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            if not host:
                raise ZooKeeperConnectError(f"no host in {server!r}")
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ZooKeeperConnectError(f"port {port_text!r} of {server!r} is not a TCP port")
            hosts.append((host, int(port_text)))
        return cls(tuple(hosts), chroot_path)

    @property
    def servers(self) -> str:
        """The servers alone, as ZooKeeper clients take them: ``host:port,host:port``."""
        return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.hosts)

    def __str__(self) -> str:
        return self.servers + (self.chroot or "")
