"""The broker's state, owned by its one event loop: logs, topics, producer ids, waiters.

Handlers reach everything through ``BrokerState``. Nothing here blocks the loop: fsync runs in a
worker thread (``flush``), and fetch long-polls wait on futures that ``notify_append`` completes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.base.clock import Clock
from strom.broker.config import BrokerConfig, with_persisted_dynamic_configs
from strom.broker.groups import GroupService
from strom.broker.metrics import BrokerMetrics, add_remote_wait
from strom.cluster.model import Endpoint
from strom.coordinator import OFFSETS_TOPIC
from strom.storage import LogManager, PartitionLog

log = logging.getLogger("strom.broker")

TopicPartition = tuple[str, int]

# Producer ids are handed out from blocks reserved on disk first, so a restart never reuses one.
PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdAllocator:
    """Allocates producer ids that stay unique across restarts (a block is persisted before use)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._next = 0
        self._block_end = 0
        if path.exists():
            self._next = int(json.loads(path.read_text(encoding="utf-8"))["next_block_start"])
            self._block_end = self._next

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + PRODUCER_ID_BLOCK_SIZE
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"next_block_start": self._block_end}), encoding="utf-8")
            with open(temporary, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(temporary, self._path)
        producer_id = self._next
        self._next += 1
        return producer_id


class BrokerState:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        # What AlterConfigs set on the BROKER resource before a restart applies from the start.
        config, self._config_messages = with_persisted_dynamic_configs(config)
        self.config = config
        self.clock = clock
        self.node_id = config.node_id
        self.metrics = BrokerMetrics()
        # What clients are told to connect to, by listener name: the server sets it once its
        # listeners are bound (a listener on port 0 advertises the port it got).
        self.advertised: dict[str, Endpoint] = {
            endpoint.listener: endpoint for endpoint in config.advertised_listeners()
        }
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = config.cluster_id()
        self.logs = LogManager(config.data_dir, config.log_defaults(), clock)
        self.producer_ids = ProducerIdAllocator(config.data_dir / "producer_ids.json")
        self._append_waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._flush_locks: dict[TopicPartition, asyncio.Lock] = {}
        self._disk_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-fsync")
        self.groups = GroupService(
            config.coordinator_config(), self.logs, clock, self.notify_append, self._flush_offsets_partition
        )

    def _flush_offsets_partition(self, partition: int) -> asyncio.Future[None] | None:
        partition_log = self.logs.log(OFFSETS_TOPIC, partition)
        if partition_log is None:
            return None
        return asyncio.ensure_future(self.flush(partition_log))

    def load(self) -> None:
        for line in self._config_messages:
            log.warning("%s", line)
        for line in self.logs.load():
            log.info("%s", line)

    def advertised_endpoint(self, listener: str) -> Endpoint:
        """The host and port clients reaching this broker through ``listener`` are told to use."""
        found = self.advertised.get(listener)
        return found if found is not None else next(iter(self.advertised.values()))

    def close(self) -> None:
        self.groups.shutdown()
        self._disk_executor.shutdown(wait=True)
        self.logs.close()

    # -- long polls -------------------------------------------------------------------------------

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake every fetch waiting on this partition."""
        waiters = self._append_waiters.pop((topic, partition), None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_for_append(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> None:
        """Return when one of ``partitions`` is appended to, or after ``timeout_ms``."""
        if timeout_ms <= 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._append_waiters.setdefault(key, set()).add(waiter)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(waiter, timeout_ms / 1000)
        except TimeoutError:
            pass
        finally:
            add_remote_wait(time.perf_counter() - started)
            for key in keys:
                waiters = self._append_waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._append_waiters[key]

    # -- durability -------------------------------------------------------------------------------

    async def flush(self, partition_log: PartitionLog) -> None:
        """fsync ``partition_log`` in the worker thread; concurrent calls for one log serialize."""
        key = (partition_log.topic, partition_log.partition)
        lock = self._flush_locks.setdefault(key, asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(self._disk_executor, partition_log.flush)
            self.metrics.observe_flush(time.perf_counter() - started)

    async def flush_due(self) -> None:
        """The time-based flush policy: fsync every log whose flush.ms has passed."""
        now_ms = self.clock.wall_ms()
        for partition_log in self.logs.logs_needing_flush(now_ms):
            await self.flush(partition_log)
