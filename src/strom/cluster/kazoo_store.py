"""``ZkStore`` over kazoo, the ZooKeeper client: the only module of strom that imports kazoo.

kazoo runs its own threads (one for the connection, one for callbacks); every call here blocks the
calling thread until ZooKeeper answers, so the broker calls it from a worker thread, never from its
event loop. Watches and session listeners are called on kazoo's callback thread.

The chroot is handled here rather than by kazoo: paths are prefixed and answers stripped, and the
chroot is created when missing (kazoo would only warn, and every call would then fail).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from typing import Any, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError as KazooBadVersion,
)
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.exceptions import (
    NodeExistsError as KazooNodeExists,
)
from kazoo.exceptions import (
    NoNodeError as KazooNoNode,
)
from kazoo.exceptions import (
    NotEmptyError as KazooNotEmpty,
)
from kazoo.exceptions import (
    SessionExpiredError as KazooSessionExpired,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from strom.base import limits
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.zk_store import (
    BadVersionError,
    Check,
    ConnectionLossError,
    Create,
    Delete,
    MultiError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SessionEvent,
    SessionExpiredError,
    SessionListener,
    SetData,
    Stat,
    Watch,
    WatchEvent,
    WatchKind,
    ZkError,
    ZkUnavailableError,
)

log = logging.getLogger("strom.cluster.zookeeper")

# Reconnecting after a lost connection (see ``reconnect_policy``): the first pause, the longest,
# and the spread around each pause (so brokers do not all knock at once on a restarted server).
RECONNECT_DELAY_FIRST_S = 0.1
RECONNECT_DELAY_MAX_S = 1.0
RECONNECT_JITTER = 0.4

_WATCH_KINDS = {
    "CREATED": WatchKind.CREATED,
    "DELETED": WatchKind.DELETED,
    "CHANGED": WatchKind.CHANGED,
    "CHILD": WatchKind.CHILDREN,
}


def _translate(error: BaseException) -> ZkError:
    if isinstance(error, ZkError):
        return error
    if isinstance(error, KazooNoNode):
        return NoNodeError(str(error))
    if isinstance(error, KazooNodeExists):
        return NodeExistsError(str(error))
    if isinstance(error, KazooBadVersion):
        return BadVersionError(str(error))
    if isinstance(error, KazooNotEmpty):
        return NotEmptyError(str(error))
    if isinstance(error, KazooSessionExpired):
        return SessionExpiredError(str(error))
    if isinstance(error, ConnectionLoss | ConnectionClosedError | OperationTimeoutError | KazooTimeoutError):
        return ConnectionLossError(f"{type(error).__name__}: {error}")
    return ZkError(f"{type(error).__name__}: {error}")


def reconnect_policy(session_timeout_ms: int) -> KazooRetry:
    """How the client tries the servers again after losing its connection: forever, at most
    ``RECONNECT_DELAY_MAX_S`` apart (less for a short session timeout). kazoo's own policy doubles
    the pause up to an hour: after a 6 s ZooKeeper outage the brokers tried again up to 6 s after
    the server was back, when their sessions had expired, so every broker bounced. The
    server keeps a session for a whole session timeout after it starts again; a client that tries
    again at least every quarter of it keeps its session and its registration."""
    delay_max_s = min(RECONNECT_DELAY_MAX_S, session_timeout_ms / 1000 / 4)
    return KazooRetry(
        max_tries=-1,
        delay=min(RECONNECT_DELAY_FIRST_S, delay_max_s),
        backoff=2,
        max_jitter=RECONNECT_JITTER,
        max_delay=delay_max_s / (1 + RECONNECT_JITTER),
    )


def _stat(raw: Any) -> Stat:
    return Stat(
        version=int(raw.version),
        czxid=int(raw.czxid),
        mzxid=int(raw.mzxid),
        ephemeral_owner=int(raw.ephemeralOwner),
        num_children=int(raw.numChildren),
    )


class KazooStore:
    """A ZooKeeper session (see ``connect``)."""

    def __init__(self, client: KazooClient, chroot: str | None) -> None:
        self._client = client
        self._chroot = chroot or ""
        self._listeners: list[SessionListener] = []
        self._closed = False
        # Watches set and not yet fired (token -> path, callback), and those lost with a
        # connection, to fire when it comes back (see ``_on_state``). kazoo's threads touch both.
        self._armed: dict[int, tuple[str, Watch]] = {}
        self._lost: dict[int, tuple[str, Watch]] = {}
        self._watch_tokens = itertools.count()
        self._watch_lock = threading.Lock()
        client.add_listener(self._on_state)

    @classmethod
    def connect(
        cls,
        connect: ZooKeeperConnect,
        *,
        session_timeout_ms: int = 18_000,
        connect_timeout_ms: int = 18_000,
    ) -> KazooStore:
        """Open a session, waiting at most ``connect_timeout_ms``; ZkUnavailableError after that."""
        client = KazooClient(
            hosts=connect.servers,
            timeout=session_timeout_ms / 1000,
            connection_retry=reconnect_policy(session_timeout_ms),
        )
        try:
            client.start(timeout=connect_timeout_ms / 1000)
        except KazooTimeoutError:
            client.close()
            raise ZkUnavailableError(
                f"no ZooKeeper server answered at {connect.servers} within {connect_timeout_ms} ms"
            ) from None
        store = cls(client, connect.chroot)
        if connect.chroot:
            try:
                client.ensure_path(connect.chroot)
            except KazooException as error:
                store.close()
                raise _translate(error) from None
        return store

    @property
    def session_id(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    @property
    def negotiated_session_timeout_ms(self) -> int:
        return int(self._client._session_timeout)

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password): lets a test end this session from another client."""
        return cast("tuple[int, bytes] | None", self._client.client_id)

    def add_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread. kazoo forgets every watch when the connection drops (and
        sets none again when it comes back): those armed then are lost; on the next CONNECTED of
        the same session they fire with RECONNECTED; an expired session drops them."""
        if self._closed:
            return
        event = {
            KazooState.CONNECTED: SessionEvent.CONNECTED,
            KazooState.SUSPENDED: SessionEvent.SUSPENDED,
            KazooState.LOST: SessionEvent.EXPIRED,
        }.get(state)
        if event is None:
            return
        restored: list[tuple[str, Watch]] = []
        with self._watch_lock:
            if event is SessionEvent.SUSPENDED:
                self._lost.update(self._armed)
                self._armed.clear()
            elif event is SessionEvent.EXPIRED:
                self._lost.clear()
                self._armed.clear()
            else:
                restored = list(self._lost.values())
                self._lost.clear()
        # The lost watches fire before the listeners hear CONNECTED: an owner that checks
        # everything on reconnection then knows which notifications are already on their way.
        for path, watch in restored:
            self._fire(watch, WatchEvent(WatchKind.RECONNECTED, path))
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("ZooKeeper session listener failed on %s", event.value)

    @staticmethod
    def _fire(watch: Watch, event: WatchEvent) -> None:
        try:
            watch(event)
        except Exception:
            log.exception("ZooKeeper watch on %s failed", event.path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.stop()
        finally:
            self._client.close()

    # ---- paths ----------------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return self._chroot + path if path != "/" else (self._chroot or "/")

    def _relative(self, path: str) -> str:
        if self._chroot and path.startswith(self._chroot):
            return path[len(self._chroot) :] or "/"
        return path

    def _arm(self, watch: Watch | None, path: str) -> tuple[Any, int]:
        """kazoo's callback for ``watch`` (None for no watch) and its token, counted as armed from
        now on (``_disarm`` it if the operation fails: kazoo then sets no watch)."""
        if watch is None:
            return None, -1
        token = next(self._watch_tokens)
        with self._watch_lock:
            self._armed[token] = (path, watch)

        def relay(event: Any) -> None:
            kind = _WATCH_KINDS.get(event.type)
            if kind is None:
                # kazoo dropping its watches with the connection (or the session): _on_state
                # has taken this one among the lost, or dropped it with the session.
                return
            with self._watch_lock:
                fired = self._armed.pop(token, None) or self._lost.pop(token, None)
            if fired is not None:
                self._fire(watch, WatchEvent(kind, self._relative(event.path)))

        return relay, token

    def _disarm(self, token: int) -> None:
        with self._watch_lock:
            self._armed.pop(token, None)
            self._lost.pop(token, None)

    def _rooted(self, op: Op) -> Op:
        if isinstance(op, Create):
            return Create(self._full(op.path), op.data, op.ephemeral, op.sequence)
        if isinstance(op, SetData):
            return SetData(self._full(op.path), op.data, op.version)
        if isinstance(op, Delete):
            return Delete(self._full(op.path), op.version)
        return Check(self._full(op.path), op.version)

    # ---- operations -----------------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> str:
        try:
            created = self._client.create(self._full(path), data, ephemeral=ephemeral, sequence=sequence)
        except KazooException as error:
            raise _translate(error) from None
        return self._relative(str(created))

    def ensure_path(self, path: str) -> None:
        try:
            self._client.ensure_path(self._full(path))
        except KazooException as error:
            raise _translate(error) from None

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, Stat]:
        relay, token = self._arm(watch, path)
        try:
            data, raw = self._client.get(self._full(path), watch=relay)
        except KazooException as error:
            self._disarm(token)
            raise _translate(error) from None
        return bytes(data or b""), _stat(raw)

    def exists(self, path: str, watch: Watch | None = None) -> Stat | None:
        relay, token = self._arm(watch, path)
        try:
            raw = self._client.exists(self._full(path), watch=relay)
        except KazooException as error:
            self._disarm(token)
            raise _translate(error) from None
        return None if raw is None else _stat(raw)

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        relay, token = self._arm(watch, path)
        try:
            children = self._client.get_children(self._full(path), watch=relay)
        except KazooException as error:
            self._disarm(token)
            raise _translate(error) from None
        return sorted(str(child) for child in children)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        try:
            return _stat(self._client.set(self._full(path), data, version))
        except KazooException as error:
            raise _translate(error) from None

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        try:
            self._client.delete(self._full(path), version, recursive=recursive)
        except KazooException as error:
            raise _translate(error) from None

    def _transaction(self, ops: Sequence[Op]) -> Any:
        transaction = self._client.transaction()
        for op in ops:
            rooted = self._rooted(op)
            if isinstance(rooted, Create):
                transaction.create(
                    rooted.path, rooted.data, ephemeral=rooted.ephemeral, sequence=rooted.sequence
                )
            elif isinstance(rooted, SetData):
                transaction.set_data(rooted.path, rooted.data, rooted.version)
            elif isinstance(rooted, Delete):
                transaction.delete(rooted.path, rooted.version)
            else:
                transaction.check(rooted.path, rooted.version)
        return transaction.commit_async()

    def _outcome(self, ops: Sequence[Op], results: Sequence[Any]) -> list[OpResult] | MultiError:
        for index, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(
                result, RolledBackError | RuntimeInconsistency
            ):
                return MultiError(index, _translate(result))
        converted: list[OpResult] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, Create):
                converted.append(self._relative(str(result)))
            elif isinstance(op, SetData):
                converted.append(_stat(result))
            else:
                converted.append(None)
        return converted

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        outcome = self.multi_many([ops])[0]
        if isinstance(outcome, ZkError):
            raise outcome
        return outcome

    def multi_many(self, transactions: Sequence[Sequence[Op]]) -> list[list[OpResult] | ZkError]:
        outcomes: list[list[OpResult] | ZkError] = []
        step = limits.zookeeper_requests_in_flight_max
        for start in range(0, len(transactions), step):
            batch = transactions[start : start + step]
            try:
                pending = [self._transaction(ops) for ops in batch]
                for ops, result in zip(batch, pending, strict=True):
                    outcomes.append(self._outcome(ops, result.get()))
            except KazooException as error:
                raise _translate(error) from None
        return outcomes

    def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        found: list[tuple[bytes, Stat] | None] = []
        step = limits.zookeeper_requests_in_flight_max
        for start in range(0, len(paths), step):
            batch = paths[start : start + step]
            try:
                pending = [self._client.get_async(self._full(path)) for path in batch]
            except KazooException as error:
                raise _translate(error) from None
            for result in pending:
                try:
                    data, raw = result.get()
                except KazooNoNode:
                    found.append(None)
                    continue
                except KazooException as error:
                    raise _translate(error) from None
                found.append((bytes(data or b""), _stat(raw)))
        return found
