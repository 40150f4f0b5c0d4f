"""The broker's state, owned by its one event loop: logs, topics, producer ids, waiters.

Handlers reach everything through ``BrokerState``. Nothing here blocks the loop with file-system
work: fsync runs in the fsync worker thread (``flush``); admin work (creating and deleting topics
and partitions, rewriting topic files) runs in the admin worker thread, which builds files and log
objects and hands them back, and only the loop swaps them into the maps (see ``LogManager``'s
phases); compaction and removing deleted files run in a background thread. Fetch long-polls wait on
futures that ``notify_append`` (``wake_readers`` / ``wake_replicas``) completes.

The data directory is locked (``DataDirectoryLock``) before anything in it is read or written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from strom.base import limits
from strom.base.clock import Clock
from strom.broker.authorization import AclService, FileAclStore
from strom.broker.config import BrokerConfig, with_persisted_dynamic_configs
from strom.broker.fetch_sessions import FetchSessionCache
from strom.broker.group_configs import BrokerGroupConfigs
from strom.broker.group_topics import BrokerTopics
from strom.broker.groups import GroupService
from strom.broker.metrics import BrokerMetrics, add_remote_wait
from strom.broker.produce_validation import ProduceValidation
from strom.broker.quotas import BrokerQuotas
from strom.broker.registry import HANDLERS, Handler
from strom.broker.replication import Replication, SingleNode
from strom.broker.transactions import LocalMarkers, TransactionService
from strom.cluster.model import Endpoint
from strom.coordinator import OFFSETS_TOPIC
from strom.coordinator.transactions import TRANSACTION_STATE_TOPIC
from strom.security.acl import Authorizer
from strom.security.credentials import CredentialTableStore, ScramCredentialStore
from strom.storage import LogFileError, LogManager, PartitionLog, TopicMetadata
from strom.storage.budget import FileBudget
from strom.storage.compaction import run_compaction
from strom.storage.files import empty_trash
from strom.storage.lock import DataDirectoryLock
from strom.storage.log_manager import apply_retention, current_open_files_limit

if TYPE_CHECKING:
    from strom.broker.cluster.runtime import ClusterReplication

log = logging.getLogger("strom.broker")

TopicPartition = tuple[str, int]

# Producer ids are handed out from blocks reserved on disk first, so a restart never reuses one.
PRODUCER_ID_BLOCK_SIZE = 1000
# Housekeeping gives the loop back to everyone else after this many logs (retention is cheap per
# log, but a broker may hold tens of thousands).
HOUSEKEEPING_LOGS_PER_STEP = 500

T = TypeVar("T")


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
        # First of all: a second broker on this directory stops here (DataDirectoryLockedError).
        self._lock = DataDirectoryLock(config.data_dir)
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
        self.cluster_id = config.cluster_id()
        self.budget = FileBudget.from_open_files_limit(current_open_files_limit())
        self.logs = LogManager(config.data_dir, config.log_defaults(), clock, self.budget)
        self.producer_ids = ProducerIdAllocator(config.data_dir / "producer_ids.json")
        # Client quotas (seed 003 §2.9): kept in the data directory, charged by the connection loop.
        self.quotas = BrokerQuotas(config, clock)
        # Fetches waiting for records to read: consumers (woken when what they may read grows),
        # and followers (woken by appends). The same map on a single node, where the two are one;
        # a broker in a cluster gives followers their own (``separate_replica_waits``).
        self._append_waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._replica_waiters = self._append_waiters
        # Called after every append to a partition this broker leads: on a single node what was
        # appended is readable at once; a broker in a cluster replaces it with its replica state's
        # (followers are woken at once, consumers when the high watermark moves).
        self.notify_append: Callable[[str, int], None] = self.wake_readers
        self._flush_locks: dict[TopicPartition, asyncio.Lock] = {}
        self._disk_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-fsync")
        # Admin requests' file work, one at a time in arrival order.
        self._admin_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-admin")
        # Long background work that must not hold up admin requests: compaction, and removing
        # what was deleted (removing a directory takes milliseconds on some disks, so a topic of
        # thousands of partitions takes many seconds).
        self._background_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-background")
        # Produced records too large to check on the loop are checked in its threads.
        self.produce_validation = ProduceValidation()
        self.fetch_sessions = FetchSessionCache()
        # SCRAM credentials (Describe/AlterUserScramCredentials, SASL SCRAM logins): the server sets
        # its store here before it starts.
        self.scram_credentials: ScramCredentialStore = CredentialTableStore()
        self._topic_locks = _KeyedLocks()
        self._stopping = threading.Event()
        self._collector_holds = 0
        self.groups = GroupService(
            config.coordinator_config(),
            self.logs,
            clock,
            lambda topic, partition: self.notify_append(topic, partition),
            self._flush_offsets_partition,
            BrokerTopics(lambda: self.replication, self._broker_racks),
        )
        # Group configs (KIP-848) for the group coordinator: kept in the data directory (a cluster
        # gives it ZooKeeper's: ``strom.broker.cluster``).
        self.group_configs = BrokerGroupConfigs(
            config.data_dir, config.coordinator_config(), self.groups.coordinator.set_group_configs
        )
        # The transaction coordinator on __transaction_state; a single node writes its markers itself.
        self.transactions = TransactionService(
            config.transaction_config(),
            self.logs,
            clock,
            lambda topic, partition: self.notify_append(topic, partition),
            self._flush_transaction_state_partition,
            self.groups,
            lambda: self.replication.allocate_producer_id(),
        )
        self.transactions.deliver_markers_through(
            LocalMarkers(self, config.get_int("offsets.commit.timeout.ms"))
        )
        # Who leads what, who may read and append where (a cluster replaces it: ``strom.broker.cluster``).
        self.replication: Replication = SingleNode(self)
        # The cluster runtime when this broker is one of a cluster (set by the server), and the
        # APIs this broker serves and advertises.
        self.cluster: ClusterReplication | None = None
        self.handlers: Mapping[int, Handler] = HANDLERS
        # ACLs: None when authorization is off (``authorizer.class.name`` empty), which is all a
        # handler then checks (``strom.broker.authorization``).
        self.authorizer: Authorizer | None = None
        self.acls: AclService | None = None
        settings = config.authorizer_settings()
        if settings is not None:
            super_users, allow_if_no_acl = settings
            self.authorizer = Authorizer(super_users, allow_if_no_acl)
            self.acls = AclService(self.authorizer, FileAclStore(config.data_dir))

    def _broker_racks(self) -> dict[int, str]:
        """The rack of each broker that has one (``broker.rack``): a single node's own, or the
        live brokers' of a cluster."""
        if self.cluster is None:
            rack = self.config.get_str("broker.rack")
            return {self.node_id: rack} if rack else {}
        return {broker.node_id: broker.rack for broker in self.cluster.brokers("") if broker.rack}

    def _flush_offsets_partition(self, partition: int) -> asyncio.Future[None] | None:
        return self._flush_internal(OFFSETS_TOPIC, partition)

    def _flush_transaction_state_partition(self, partition: int) -> asyncio.Future[None] | None:
        return self._flush_internal(TRANSACTION_STATE_TOPIC, partition)

    def _flush_internal(self, topic: str, partition: int) -> asyncio.Future[None] | None:
        partition_log = self.logs.log(topic, partition)
        if partition_log is None:
            return None
        return asyncio.ensure_future(self.flush(partition_log))

    def load(self) -> None:
        for line in self._config_messages:
            log.warning("%s", line)
        self.quotas.load()
        self.group_configs.load()
        log.info("%s", self.budget.describe())
        started = time.perf_counter()
        if self.acls is not None:
            self.acls.load()
        for line in self.logs.load():
            log.info("%s", line)
        log.info(
            "loaded %d partitions of %d topics in %.2f s",
            self.logs.partitions_held,
            len(self.logs.topic_names()),
            time.perf_counter() - started,
        )
        self._empty_trash_soon()
        gc.freeze()

    def advertised_endpoint(self, listener: str) -> Endpoint:
        """The host and port clients reaching this broker through ``listener`` are told to use."""
        found = self.advertised.get(listener)
        return found if found is not None else next(iter(self.advertised.values()))

    def close(self) -> None:
        self.groups.shutdown()
        self.transactions.shutdown()
        self._stopping.set()
        # Admin work still queued is dropped (what it would remove is removed on the next start);
        # work under way finishes, so no file is left half-written.
        self._admin_executor.shutdown(wait=True, cancel_futures=True)
        self._background_executor.shutdown(wait=True, cancel_futures=True)
        self.produce_validation.close()
        self._disk_executor.shutdown(wait=True)
        try:
            self.logs.close()
        finally:
            self._lock.release()

    # -- admin work (file-system work in the admin thread, state swapped in on the loop) ---------

    async def _in_admin_thread(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._admin_executor, work)

    @contextlib.contextmanager
    def _long_lived_objects_made(self, partitions: int) -> Iterator[None]:
        """Around the building of many long-lived objects (the logs of thousands of partitions):
        no cyclic garbage collection meanwhile, then they are frozen out of its reach. Creates of
        fewer than ``limits.partitions_frozen_from_collector_min`` partitions are left alone: the
        stall they could cause is short, and freezing is not free (see below).

        A full collection visits every object the broker holds, whichever thread triggers it, with
        the GIL held: with thousands of partitions' logs that is 100 ms and more during which no
        client is served. Logs and segments live as long as their partition and form no reference
        cycles (reference counting frees them when a topic is deleted), so the collector has no
        business visiting them; ``gc.freeze`` moves everything alive into its permanent generation
        (as after ``load``). Loop thread only."""
        if partitions < limits.partitions_frozen_from_collector_min:
            yield
            return
        if self._collector_holds == 0:
            gc.disable()
        self._collector_holds += 1
        try:
            yield
        finally:
            self._collector_holds -= 1
            if self._collector_holds == 0:
                # No collection first: the young generation now holds every object made meanwhile,
                # and collecting it would be the very stall this avoids. The little cyclic garbage
                # of those seconds is frozen too (a bounded leak per create).
                gc.freeze()
                gc.enable()

    def _empty_trash_soon(self) -> None:
        paths = self.logs.trash.take()
        if paths:
            self._background_executor.submit(empty_trash, paths, self._stopping)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """``LogManager.create_topic`` with its file work in the admin thread; raises the same."""
        if validate_only:
            return self.logs.check_create_topic(name, partitions, overrides, internal=internal)
        async with self._topic_locks.hold(name):
            pending = self.logs.begin_create_topic(name, partitions, overrides, internal=internal)
            with self._long_lived_objects_made(partitions):
                try:
                    built = await self._in_admin_thread(lambda: self.logs.build_create(pending))
                except BaseException:
                    self.logs.abandon_create(pending)
                    raise
                installed = self.logs.install_create(built)
            self.groups.topics_changed([name])
            return installed

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        async with self._topic_locks.hold(name):
            pending = self.logs.begin_create_partitions(name, total)
            if validate_only:
                self.logs.abandon_create(pending)
                return
            with self._long_lived_objects_made(total):
                try:
                    built = await self._in_admin_thread(lambda: self.logs.build_create(pending))
                except BaseException:
                    self.logs.abandon_create(pending)
                    raise
                self.logs.install_create(built)
            self.groups.topics_changed([name])

    async def delete_topic(self, name: str) -> TopicMetadata:
        """Forget the topic at once (loop), commit the delete and rename its directories (admin
        thread, awaited), then remove them in the background, as Kafka does."""
        async with self._topic_locks.hold(name):
            detached = self.logs.detach_topic(name)
            self.groups.topics_changed([name])
            for partition in range(detached.metadata.partitions):
                self._flush_locks.pop((name, partition), None)
            renamed = await self._in_admin_thread(lambda: self.logs.remove_topic_files(detached))
            self._background_executor.submit(empty_trash, renamed, self._stopping)
            return detached.metadata

    async def host_partitions(
        self,
        name: str,
        topic_id: uuid.UUID,
        partitions: Iterable[int],
        overrides: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> list[PartitionLog]:
        """A broker in a cluster: make the logs of the partitions the controller placed here (file
        work in the admin thread); returns the logs made (none if all were here)."""
        async with self._topic_locks.hold(name):
            pending = self.logs.begin_host_partitions(
                name, topic_id, partitions, overrides, internal=internal
            )
            if pending is None:
                return []
            with self._long_lived_objects_made(len(pending.new_partitions)):
                try:
                    built = await self._in_admin_thread(lambda: self.logs.build_create(pending))
                except BaseException:
                    self.logs.abandon_create(pending)
                    raise
                self.logs.install_create(built)
                return built.logs

    async def remove_partitions(self, name: str, partitions: Iterable[int]) -> None:
        """A broker in a cluster: delete the logs of partitions it no longer replicates (the
        topic goes with its last one); the directories are removed in the background."""
        async with self._topic_locks.hold(name):
            detached = self.logs.begin_remove_partitions(name, partitions)
            if detached is None:
                return
            for partition in detached.partitions:
                self._flush_locks.pop((name, partition), None)
            renamed = await self._in_admin_thread(lambda: self.logs.remove_topic_files(detached))
            self._background_executor.submit(empty_trash, renamed, self._stopping)

    async def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        async with self._topic_locks.hold(name):
            updated = self.logs.prepare_topic_config(name, overrides)
            await self._in_admin_thread(lambda: self.logs.write_topic_file(updated))
            self.logs.apply_topic_config(updated)

    async def delete_records(self, partition_log: PartitionLog, offset: int) -> int:
        """DeleteRecords on one partition: the new log start is durable when this returns; the
        segments below it are removed in the background."""
        low_watermark = partition_log.delete_records_before(offset)
        await self.flush(partition_log)
        self._empty_trash_soon()
        return low_watermark

    async def run_housekeeping(self) -> None:
        """Retention (loop, in steps: it only renames files) and compaction (background thread),
        then the files they dropped are removed (background thread)."""
        now_ms = self.clock.wall_ms()
        partition_logs = list(self.logs.logs())
        for start in range(0, len(partition_logs), HOUSEKEEPING_LOGS_PER_STEP):
            for partition_log in partition_logs[start : start + HOUSEKEEPING_LOGS_PER_STEP]:
                for line in apply_retention(partition_log, now_ms):
                    log.info("%s", line)
            await asyncio.sleep(0)
        await self._compact(partition_logs, now_ms, only_new=False)

    async def run_cleaner(self) -> None:
        """Compaction of the compacted logs with inactive segments not compacted yet (Kafka's log
        cleaner looks every ``log.cleaner.backoff.ms``); every one is compacted again with the
        retention pass (``run_housekeeping``), for tombstones and lags that came due."""
        await self._compact(list(self.logs.logs()), self.clock.wall_ms(), only_new=True)

    async def _compact(self, partition_logs: list[PartitionLog], now_ms: int, *, only_new: bool) -> None:
        for position, partition_log in enumerate(partition_logs, 1):
            if position % HOUSEKEEPING_LOGS_PER_STEP == 0:
                await asyncio.sleep(0)  # thousands of logs are looked at in steps, as retention's
            job = partition_log.plan_compaction(now_ms, only_new=only_new)
            if job is None:
                continue
            name = f"{partition_log.topic}-{partition_log.partition}"
            try:
                result = await asyncio.get_running_loop().run_in_executor(
                    self._background_executor, functools.partial(run_compaction, job)
                )
            except Exception:
                log.exception("compaction of %s failed; will retry at the next interval", name)
                continue
            freed = partition_log.finish_compaction(result)
            if freed:
                log.info("compacted %s: freed %d bytes", name, freed)
        self._empty_trash_soon()

    # -- long polls -------------------------------------------------------------------------------

    def wake_readers(self, topic: str, partition: int) -> None:
        """What consumers may read of this partition grew: wake the fetches waiting on it."""
        waiters = self._append_waiters.pop((topic, partition), None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def wake_replicas(self, topic: str, partition: int) -> None:
        """Records were appended to a partition followers copy."""
        _wake(self._replica_waiters, (topic, partition))

    def separate_replica_waits(self) -> None:
        """Followers' fetches wait for appends, consumers' for the high watermark (a cluster)."""
        self._replica_waiters = {}

    async def wait_for_append(
        self, partitions: Iterable[TopicPartition], timeout_ms: int, *, replica: bool = False
    ) -> None:
        """Return when one of ``partitions`` has more to read, or after ``timeout_ms``
        (``replica``: a follower's fetch, woken by appends rather than by the high watermark)."""
        if timeout_ms <= 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        table = self._replica_waiters if replica else self._append_waiters
        for key in keys:
            table.setdefault(key, set()).add(waiter)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(waiter, timeout_ms / 1000)
        except TimeoutError:
            pass
        finally:
            add_remote_wait(time.perf_counter() - started)
            for key in keys:
                waiters = table.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del table[key]

    # -- durability -------------------------------------------------------------------------------

    async def flush(self, partition_log: PartitionLog) -> None:
        """fsync ``partition_log`` (and write its pending files) in the fsync thread; concurrent
        calls for one log serialize. A failure (out of descriptors, disk full, an I/O error)
        raises LogFileError: the caller answers KAFKA_STORAGE_ERROR, and the next flush retries."""
        key = (partition_log.topic, partition_log.partition)
        lock = self._flush_locks.setdefault(key, asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            try:
                await asyncio.get_running_loop().run_in_executor(self._disk_executor, partition_log.flush)
            except OSError as error:
                raise LogFileError(f"cannot flush {key[0]}-{key[1]}: {error}") from error
            self.metrics.observe_flush(time.perf_counter() - started)

    async def flush_due(self) -> None:
        """The time-based flush policy: fsync every log whose flush.ms has passed, and write the
        partition files and producer snapshots waiting to be written."""
        now_ms = self.clock.wall_ms()
        failures: list[str] = []
        for partition_log in self.logs.logs_needing_flush(now_ms):
            try:
                await self.flush(partition_log)
            except LogFileError as error:
                failures.append(str(error))
        if failures:
            log.error("scheduled flush failed for %d partitions, will retry (%s)", len(failures), failures[0])


def _wake(table: dict[TopicPartition, set[asyncio.Future[None]]], key: TopicPartition) -> None:
    waiters = table.pop(key, None)
    if waiters:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class _KeyedLocks:
    """One asyncio lock per key, kept only while someone holds or waits for it: admin operations on
    one topic run one after the other (begin, build, install), different topics in any order."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]
