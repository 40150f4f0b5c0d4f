"""Run a broker in this process until SIGTERM or SIGINT."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.broker.listener_security import unoffered_security_settings
from strom.broker.scram_store import ScramStoreError
from strom.broker.server import BrokerServer
from strom.storage.lock import DataDirectoryLockedError

log = logging.getLogger("strom.broker")

# Where Linux keeps the largest RLIMIT_NOFILE a process may have (an unlimited hard limit cannot be
# the soft one), and what to assume if it cannot be read.
NR_OPEN_PATH = Path("/proc/sys/fs/nr_open")
NR_OPEN_DEFAULT = 1_048_576


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (Kafka's start scripts expect operators to
    do this; strom does it itself) and log both; returns the soft limit now in force. The broker's
    file budget (``storage.budget``) is derived from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(NR_OPEN_PATH.read_text().strip())
        except (OSError, ValueError):
            target = NR_OPEN_DEFAULT
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            log.warning("could not raise the open files limit from %d to %d: %s", soft, target, error)
    raised, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    log.info("open files limit: soft %d (was %d), hard %s", raised, soft, hard_text)
    return raised


# glibc's malloc (mallopt(3)): allocations of at least MMAP_THRESHOLD_BYTES are mapped and unmapped
# one by one; free memory at the top of the heap beyond TRIM_THRESHOLD_BYTES is given back.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 << 20
TRIM_THRESHOLD_BYTES = 16 << 20
MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Keep up to ``TRIM_THRESHOLD_BYTES`` of freed memory for reuse, and serve requests of up to
    ``MMAP_THRESHOLD_BYTES`` (produced batches, fetch answers) from the heap; whether it was done.

    glibc's own thresholds move with the program: after a 1 MiB block is freed, blocks of that
    size come from the heap, but free memory of more than twice that at its top is given back to
    the system, and the next request of that size touches fresh pages again (a page fault and a
    zeroed page each 4 KiB). A broker takes in and lets go of a produce request's megabyte many
    times a second. Not done when the operator set glibc's own variables, or on another libc."""
    if platform.libc_ver()[0] != "glibc" or any(name in os.environ for name in MALLOC_ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


class BesideBroker(Protocol):
    """A service run in the broker's process and event loop (the web console, ``strom broker
    --console-port``): started before the broker, stopped after it. What the broker gives it is
    ``bootstrap()``: the host:port of its first PLAINTEXT listener, to reach it as any client
    would (LookupError until the broker listens)."""

    async def start(self, bootstrap: Callable[[], str]) -> None: ...

    async def stop(self) -> None: ...


def plaintext_bootstrap(server: BrokerServer) -> str:
    """host:port of the broker's first PLAINTEXT listener, as it advertises it once it listens."""
    for endpoint in server.state.advertised.values():
        if endpoint.security_protocol == "PLAINTEXT":
            if endpoint.port == 0 or not server._servers:
                raise LookupError("the broker is not listening yet")
            return f"{endpoint.host or '127.0.0.1'}:{endpoint.port}"
    raise LookupError("the broker has no PLAINTEXT listener")


def run_broker(
    config: BrokerConfig,
    metrics_port: int | None = None,
    add_scram: list[tuple[str, str, str, int]] | None = None,
    beside: BesideBroker | None = None,
) -> int:
    import uvloop

    raise_open_files_limit()
    keep_freed_memory()
    unused = config.unused_kafka_keys()
    if unused:
        # One line for them all: a stock server.properties sets a dozen of these.
        log.warning("ignoring Kafka settings strom does not use: %s", ", ".join(unused))
    for text in unoffered_security_settings(config):
        log.warning("not offered, left out: %s", text)

    if beside is not None and not any(e.security_protocol == "PLAINTEXT" for e in config.listeners()):
        log.error(
            "cannot start the broker: --console-port needs a PLAINTEXT listener to read the broker through"
        )
        return 1

    async def main() -> None:
        server = BrokerServer(config, metrics_port=metrics_port)
        server.add_scram = list(add_scram or [])
        if beside is None:
            await server.serve_until_signalled()
            return
        await beside.start(lambda: plaintext_bootstrap(server))
        try:
            await server.serve_until_signalled()
        finally:
            await beside.stop()

    from strom.broker.authorization import AclStoreError
    from strom.broker.cluster.runtime import ClusterStartError
    from strom.broker.group_configs import GroupConfigFileError
    from strom.broker.quotas import QuotaFileError
    from strom.cluster.config import ZooKeeperConnectError
    from strom.cluster.zk_store import ZkError
    from strom.cluster.zookeeper import BrokerIdInUseError

    try:
        uvloop.run(main())
    except (DataDirectoryLockedError, AclStoreError, QuotaFileError, GroupConfigFileError) as error:
        log.error("cannot start the broker: %s", error)
        return 1
    except (OSError, BrokerConfigError, ScramStoreError) as error:
        log.error("cannot start the broker: %s", error)
        return 1
    except (ZkError, BrokerIdInUseError, ClusterStartError, ZooKeeperConnectError) as error:
        # ZooKeeper unreachable (after zookeeper.connection.timeout.ms), this node id taken by
        # another live broker, a data directory of another cluster, a connect string that does
        # not parse: the operator gets one line saying which.
        log.error("cannot join the cluster: %s", error)
        return 1
    return 0
