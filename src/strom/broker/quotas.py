"""Client quotas in the broker: where they are kept, what each request is charged, and the mute.

The rules (precedence, windows, throttle times) are ``strom.security.quotas``; this module joins
them to requests:

- **What is charged** (as Kafka charges it): a Produce request's size against
  ``producer_byte_rate``; a consumer Fetch answer's size (not a follower's) against
  ``consumer_byte_rate``; the time a request's handler ran (until it first waited, for a request
  that waits: a long poll's wait costs no thread in Kafka either) against ``request_percentage``,
  for every request of a client (not the brokers' own: follower fetches, cluster actions; nor
  ApiVersions and the SASL exchange).
- **What an over-quota client gets** (KIP-219): its answer at once, carrying ``throttle_time_ms``
  when the answer's version has the field, and its connection is muted (not read, no request of it
  handled) for the throttle time. No request is refused. Where two quotas are exceeded the longer
  throttle applies.
- **Cost when no quota is configured:** ``BrokerQuotas.active`` is False and the connection loop
  asks nothing else.

Quotas are kept behind ``QuotaStore``: on one node a JSON file in the data directory
(``client_quotas.json``, written atomically and fsynced before the change applies, loaded at
start). A broker of a cluster keeps them in ZooKeeper where Kafka does
(``/config/users/<user>[/clients/<client>]``, ``/config/clients/<client>``, a ``/config/changes``
notification per change that makes every broker read them again): ``ClusterQuotaStore`` in
``broker/cluster/runtime.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from strom.base.clock import Clock
from strom.broker.config import BrokerConfig
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    WINDOW_NUM_KEY,
    WINDOW_SIZE_SECONDS_KEY,
    QuotaEntity,
    QuotaError,
    QuotaManager,
    QuotaWindow,
    check_quota_value,
)
from strom.storage.files import write_file_atomically

log = logging.getLogger("strom.broker.quotas")

QUOTAS_FILE_NAME = "client_quotas.json"
_FILE_VERSION = 1
PRODUCE_API_KEY = 0
FETCH_API_KEY = 1
# Never charged, as in Kafka: the cluster actions brokers send one another (LeaderAndIsr,
# StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition; follower
# fetches are told apart by the caller), and what a client sends before it is authenticated
# (SaslHandshake, ApiVersions, SaslAuthenticate).
_EXEMPT_API_KEYS = frozenset({4, 5, 6, 7, 27, 56, 17, 18, 36})

Quotas = dict[QuotaEntity, dict[str, float]]


class QuotaFileError(ValueError):
    """The quota file is there but strom cannot read it: the broker does not start without its quotas."""


class QuotaStoreError(Exception):
    """The store could not keep a change (ZooKeeper failed); the message says why."""


class QuotaStore(Protocol):
    """Where quotas outlive the broker."""

    def load(self) -> Quotas: ...

    async def save(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Make ``values`` the entity's quotas (none: remove the entity), durably, before returning."""
        ...


class FileQuotaStore:
    """One JSON document in the data directory: ``{"version": 1, "entities": [{"entity":
    [["user", "alice"], ["client-id", null]], "quotas": {"producer_byte_rate": 1048576}}]}`` (null
    is the default entity)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / QUOTAS_FILE_NAME
        self._quotas: Quotas = {}

    def load(self) -> Quotas:
        if not self.path.exists():
            self._quotas = {}
            return {}
        try:
            document = json.loads(self.path.read_bytes())
            if document.get("version") != _FILE_VERSION:
                raise ValueError(f"version {document.get('version')!r}, expected {_FILE_VERSION}")
            quotas: Quotas = {}
            for item in document["entities"]:
                entity = QuotaEntity.of(
                    (str(kind), None if name is None else str(name)) for kind, name in item["entity"]
                )
                quotas[entity] = {
                    str(key): check_quota_value(str(key), float(value))
                    for key, value in item["quotas"].items()
                }
        except (ValueError, KeyError, TypeError, AttributeError, QuotaError) as error:
            raise QuotaFileError(f"{self.path} is not a client quota file strom can read: {error}") from None
        self._quotas = quotas
        return {entity: dict(values) for entity, values in quotas.items()}

    async def save(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        quotas = dict(self._quotas)
        if values:
            quotas[entity] = dict(values)
        else:
            quotas.pop(entity, None)
        document: dict[str, Any] = {
            "version": _FILE_VERSION,
            "entities": [
                {
                    "entity": [list(part) for part in entity.parts],
                    "quotas": dict(sorted(entity_values.items())),
                }
                for entity, entity_values in sorted(quotas.items(), key=lambda item: repr(item[0]))
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, json.dumps(document, indent=1).encode())
        self._quotas = quotas


def quota_window(config: BrokerConfig) -> QuotaWindow:
    samples = config.get_int(WINDOW_NUM_KEY)
    sample_seconds = config.get_int(WINDOW_SIZE_SECONDS_KEY)
    if samples < 1 or sample_seconds < 1:
        raise ValueError(f"{WINDOW_NUM_KEY} and {WINDOW_SIZE_SECONDS_KEY} must be at least 1")
    return QuotaWindow(samples=samples, sample_ms=sample_seconds * 1000)


class BrokerQuotas:
    """The broker's quotas: the manager, its store, and which connections are muted until when."""

    def __init__(self, config: BrokerConfig, clock: Clock, store: QuotaStore | None = None) -> None:
        self.clock = clock
        self.store: QuotaStore = store if store is not None else FileQuotaStore(config.data_dir)
        self.manager = QuotaManager(quota_window(config))
        # True once any quota is configured: the only thing the connection loop asks otherwise.
        self.active = False
        # Connection id -> monotonic ms until which it is muted (KIP-219).
        self.muted_until_ms: dict[int, int] = {}

    def load(self) -> None:
        self.manager.replace_all(self.store.load())
        self.active = self.manager.any_enabled()
        if self.active:
            log.info("client quotas loaded for %d entities", len(self.manager.configs()))

    async def set_entity(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Persist, then apply at once (to the next request of every connection)."""
        await self.store.save(entity, values)
        self.manager.set_entity(entity, values)
        self.active = self.manager.any_enabled()

    def replace_all(self, quotas: Quotas) -> None:
        """Every entity's quotas as the store now has them (a broker of a cluster: ZooKeeper
        changed, or this broker joined)."""
        self.manager.replace_all(quotas)
        self.active = self.manager.any_enabled()

    def charge(
        self,
        user: str,
        client_id: str | None,
        api_key: int,
        request_bytes: int,
        response_bytes: int,
        handler_s: float,
        follower: bool,
    ) -> int:
        """Count one request against the quotas that apply; the throttle time it earns (ms)."""
        if follower or api_key in _EXEMPT_API_KEYS:
            return 0
        manager = self.manager
        client = client_id or ""
        now_ms = self.clock.monotonic_ms()
        throttle_ms = 0
        if api_key == PRODUCE_API_KEY and manager.enabled(PRODUCER_BYTE_RATE):
            throttle_ms = manager.record(PRODUCER_BYTE_RATE, user, client, request_bytes, now_ms)
        elif api_key == FETCH_API_KEY and manager.enabled(CONSUMER_BYTE_RATE):
            throttle_ms = manager.record(CONSUMER_BYTE_RATE, user, client, response_bytes, now_ms)
        if manager.enabled(REQUEST_PERCENTAGE):
            throttle_ms = max(
                throttle_ms, manager.record(REQUEST_PERCENTAGE, user, client, handler_s * 100.0, now_ms)
            )
        return throttle_ms

    def mute(self, connection_id: int, throttle_ms: int) -> None:
        until_ms = self.clock.monotonic_ms() + throttle_ms
        if until_ms > self.muted_until_ms.get(connection_id, 0):
            self.muted_until_ms[connection_id] = until_ms

    def mute_left_ms(self, connection_id: int) -> int:
        """How much longer the connection stays muted (0: not muted; it is then forgotten)."""
        until_ms = self.muted_until_ms.get(connection_id)
        if until_ms is None:
            return 0
        left_ms = until_ms - self.clock.monotonic_ms()
        if left_ms <= 0:
            del self.muted_until_ms[connection_id]
            return 0
        return left_ms

    def forget(self, connection_id: int) -> None:
        self.muted_until_ms.pop(connection_id, None)


def set_throttle_time(response: Any, throttle_ms: int) -> bool:
    """Tell the client it was throttled, in every response that has the field (an older version
    that lacks it does not write it); whether ``response`` changed."""
    if (
        response is not None
        and hasattr(response, "throttle_time_ms")
        and throttle_ms > response.throttle_time_ms
    ):
        response.throttle_time_ms = throttle_ms
        return True
    return False
