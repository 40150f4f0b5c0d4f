"""An in-memory ZooKeeper for tests and simulations: one process, no threads, no clock.

``MemoryZooKeeper`` is the server (the tree, the sessions); ``server.connect()`` opens a session
and returns a ``MemoryZkClient`` implementing ``ZkStore``. What it models, because strom depends on
it: data versions and conditional writes; atomic multi-op transactions (checked in order, applied
all or nothing); creation zxids; ephemeral znodes deleted when their session ends; sequential
znodes; one-shot data and child watches, delivered after the operation that triggered them, to
watchers of other sessions as well. Tests drive failures by hand: ``expire(client)`` ends a
session (its listener sees EXPIRED, then CONNECTED on a fresh session, as kazoo reconnects),
``disconnect(client)`` makes its calls fail with ConnectionLossError until ``reconnect(client)``,
when the watches it had fire with RECONNECTED (as ``KazooStore`` does: the server forgets a
connection's watches).
What it does not model: ACLs, quotas, the server's own timing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    SessionListener,
    SetData,
    Stat,
    Watch,
    WatchEvent,
    WatchKind,
    ZkError,
)


@dataclass
class _Node:
    data: bytes
    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    children: set[str] = field(default_factory=set)
    next_sequence: int = 0

    def stat(self) -> Stat:
        return Stat(self.version, self.czxid, self.mzxid, self.ephemeral_owner, len(self.children))

    def copy(self) -> _Node:
        return _Node(
            self.data,
            self.version,
            self.czxid,
            self.mzxid,
            self.ephemeral_owner,
            set(self.children),
            self.next_sequence,
        )


def _parent(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"{path!r} is not a ZooKeeper path")


class MemoryZooKeeper:
    """The server side: one tree shared by every client connected to it."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, 0)}
        self._zxid = 0
        self._session_ids = itertools.count(0x1000)
        self._data_watches: dict[str, list[tuple[int, Watch]]] = {}
        self._child_watches: dict[str, list[tuple[int, Watch]]] = {}
        self._clients: dict[int, MemoryZkClient] = {}  # by current session id

    # ---- sessions -----------------------------------------------------------------------------

    def connect(self, chroot: str | None = None) -> MemoryZkClient:
        """A client with a new session; ``chroot`` is created if missing (as strom's shell does)."""
        client = MemoryZkClient(self, chroot)
        if chroot:
            _check_path(chroot)
            self._ensure(chroot)
        return client

    def _open_session(self, client: MemoryZkClient) -> int:
        session_id = next(self._session_ids)
        self._clients[session_id] = client
        return session_id

    def expire(self, client: MemoryZkClient) -> None:
        """End ``client``'s session as the server does when it stops hearing from it."""
        old = client.session_id
        self._end_session(old)
        client._on_expired()

    def disconnect(self, client: MemoryZkClient) -> None:
        """The connection drops (the session lives on): the server forgets its watches."""
        if client._connected:
            client._lost_watches.extend(self._take_watches(client.session_id))
        client._set_connected(False)

    def drop_watches(self, client: MemoryZkClient) -> None:
        """Forget ``client``'s watches without telling it: a notification lost on its way."""
        self._take_watches(client.session_id)

    def reconnect(self, client: MemoryZkClient) -> None:
        """The connection is back within the session: the watches it lost fire (RECONNECTED),
        then the listeners hear CONNECTED (as ``KazooStore`` orders them)."""
        if client._connected:
            return
        client._connected = True
        lost, client._lost_watches = client._lost_watches, []
        for path, watch in lost:
            watch(WatchEvent(WatchKind.RECONNECTED, path))
        client._notify(SessionEvent.CONNECTED)

    def _take_watches(self, session_id: int) -> list[tuple[str, Watch]]:
        taken: list[tuple[str, Watch]] = []
        for table in (self._data_watches, self._child_watches):
            for path, watches in table.items():
                taken += [(path, watch) for owner, watch in watches if owner == session_id]
                watches[:] = [(owner, watch) for owner, watch in watches if owner != session_id]
        return taken

    def _end_session(self, session_id: int) -> None:
        self._clients.pop(session_id, None)
        for watches in (*self._data_watches.values(), *self._child_watches.values()):
            watches[:] = [(owner, watch) for owner, watch in watches if owner != session_id]
        owned = sorted(
            (path for path, node in self._nodes.items() if node.ephemeral_owner == session_id),
            key=len,
            reverse=True,
        )
        events: list[tuple[str, WatchKind]] = []
        for path in owned:
            self._remove(path, events)
        self._deliver(events)

    def ephemeral_paths(self, client: MemoryZkClient) -> list[str]:
        return sorted(path for path, node in self._nodes.items() if node.ephemeral_owner == client.session_id)

    # ---- the tree -----------------------------------------------------------------------------

    def _next_zxid(self) -> int:
        self._zxid += 1
        return self._zxid

    def _ensure(self, path: str) -> None:
        events: list[tuple[str, WatchKind]] = []
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            current = "/" + "/".join(parts[:depth])
            if current not in self._nodes:
                if self._nodes[_parent(current)].ephemeral_owner:
                    raise ZkError(f"ephemeral {_parent(current)} cannot have children")
                self._add(current, b"", 0, events)
        self._deliver(events)

    def _add(self, path: str, data: bytes, owner: int, events: list[tuple[str, WatchKind]]) -> None:
        zxid = self._next_zxid()
        self._nodes[path] = _Node(data, 0, zxid, zxid, owner)
        self._nodes[_parent(path)].children.add(path.rsplit("/", 1)[1])
        events.append((path, WatchKind.CREATED))
        events.append((_parent(path), WatchKind.CHILDREN))

    def _remove(self, path: str, events: list[tuple[str, WatchKind]]) -> None:
        del self._nodes[path]
        self._nodes[_parent(path)].children.discard(path.rsplit("/", 1)[1])
        events.append((path, WatchKind.DELETED))
        events.append((_parent(path), WatchKind.CHILDREN))

    def _apply(
        self,
        op: Op,
        session_id: int,
        events: list[tuple[str, WatchKind]],
        undo: list[tuple[str, _Node | None]],
    ) -> OpResult:
        _check_path(op.path)
        if isinstance(op, Create):
            parent = self._nodes.get(_parent(op.path))
            if parent is None:
                raise NoNodeError(f"parent of {op.path} does not exist")
            if parent.ephemeral_owner:
                raise ZkError(f"ephemeral {_parent(op.path)} cannot have children")
            path = op.path
            undo.append((_parent(op.path), parent.copy()))
            if op.sequence:
                path = f"{op.path}{parent.next_sequence:010d}"
                parent.next_sequence += 1
            if path in self._nodes:
                raise NodeExistsError(path)
            undo.append((path, None))
            self._add(path, op.data, session_id if op.ephemeral else 0, events)
            return path
        node = self._nodes.get(op.path)
        if node is None:
            raise NoNodeError(op.path)
        if op.version != -1 and op.version != node.version:
            raise BadVersionError(f"{op.path} is at version {node.version}, not {op.version}")
        if isinstance(op, Check):
            return None
        undo.append((op.path, node.copy()))
        if isinstance(op, SetData):
            node.data = op.data
            node.version += 1
            node.mzxid = self._next_zxid()
            events.append((op.path, WatchKind.CHANGED))
            return node.stat()
        if node.children:
            raise NotEmptyError(op.path)
        undo.append((_parent(op.path), self._nodes[_parent(op.path)].copy()))
        self._remove(op.path, events)
        return None

    def _transact(self, ops: Sequence[Op], session_id: int) -> list[OpResult]:
        events: list[tuple[str, WatchKind]] = []
        undo: list[tuple[str, _Node | None]] = []
        results: list[OpResult] = []
        for index, op in enumerate(ops):
            try:
                results.append(self._apply(op, session_id, events, undo))
            except ZkError as error:
                for path, saved in reversed(undo):
                    if saved is None:
                        self._nodes.pop(path, None)
                    else:
                        self._nodes[path] = saved
                raise MultiError(index, error) from None
        self._deliver(events)
        return results

    def _deliver(self, events: list[tuple[str, WatchKind]]) -> None:
        due: list[tuple[Watch, WatchEvent]] = []
        for path, kind in events:
            table = self._child_watches if kind is WatchKind.CHILDREN else self._data_watches
            for _, watch in table.pop(path, []):
                due.append((watch, WatchEvent(kind, path)))
            if kind is WatchKind.DELETED:
                for _, watch in self._child_watches.pop(path, []):
                    due.append((watch, WatchEvent(kind, path)))
        for watch, event in due:
            watch(event)

    def _watch(
        self, table: dict[str, list[tuple[int, Watch]]], path: str, session_id: int, watch: Watch
    ) -> None:
        table.setdefault(path, []).append((session_id, watch))

    def dump(self) -> dict[str, bytes]:
        """Every znode's data by path (for assertions)."""
        return {path: node.data for path, node in sorted(self._nodes.items())}


class MemoryZkClient:
    """One session on a ``MemoryZooKeeper``; implements ``ZkStore``."""

    def __init__(self, server: MemoryZooKeeper, chroot: str | None) -> None:
        self._server = server
        self._chroot = chroot or ""
        self._listeners: list[SessionListener] = []
        self._connected = True
        self._closed = False
        self._session_id = server._open_session(self)
        # Watches the server forgot when the connection dropped: they fire when it is back.
        self._lost_watches: list[tuple[str, Watch]] = []

    # ---- session ------------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session_id

    def add_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def _notify(self, event: SessionEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    def _on_expired(self) -> None:
        self._lost_watches = []
        self._notify(SessionEvent.EXPIRED)
        if not self._closed:
            self._session_id = self._server._open_session(self)
            self._connected = True
            self._notify(SessionEvent.CONNECTED)

    def _set_connected(self, connected: bool) -> None:
        if connected != self._connected:
            self._connected = connected
            self._notify(SessionEvent.CONNECTED if connected else SessionEvent.SUSPENDED)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._server._end_session(self._session_id)

    def _usable(self) -> None:
        if self._closed:
            raise ConnectionLossError("the client is closed")
        if not self._connected:
            raise ConnectionLossError("disconnected from the in-memory ZooKeeper")

    def _full(self, path: str) -> str:
        _check_path(path)
        return self._chroot + path if path != "/" else (self._chroot or "/")

    def _relative(self, path: str) -> str:
        if not self._chroot:
            return path
        return path[len(self._chroot) :] or "/"

    def _wrap(self, watch: Watch) -> Watch:
        def relay(event: WatchEvent) -> None:
            watch(WatchEvent(event.kind, self._relative(event.path)))

        return relay

    # ---- operations ---------------------------------------------------------------------------

    def _one(self, op: Op) -> OpResult:
        self._usable()
        try:
            return self._server._transact([op], self._session_id)[0]
        except MultiError as error:
            raise error.cause from None

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> str:
        created = self._one(Create(self._full(path), data, ephemeral, sequence))
        assert isinstance(created, str)
        return self._relative(created)

    def ensure_path(self, path: str) -> None:
        self._usable()
        self._server._ensure(self._full(path))

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, Stat]:
        self._usable()
        full = self._full(path)
        node = self._server._nodes.get(full)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._server._watch(self._server._data_watches, full, self._session_id, self._wrap(watch))
        return node.data, node.stat()

    def exists(self, path: str, watch: Watch | None = None) -> Stat | None:
        self._usable()
        full = self._full(path)
        if watch is not None:
            self._server._watch(self._server._data_watches, full, self._session_id, self._wrap(watch))
        node = self._server._nodes.get(full)
        return None if node is None else node.stat()

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        self._usable()
        full = self._full(path)
        node = self._server._nodes.get(full)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._server._watch(self._server._child_watches, full, self._session_id, self._wrap(watch))
        return sorted(node.children)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        stat = self._one(SetData(self._full(path), data, version))
        assert isinstance(stat, Stat)
        return stat

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            self._usable()
            if self._server._nodes.get(self._full(path)) is None:
                raise NoNodeError(path)
            for child in self.get_children(path):
                self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        self._one(Delete(self._full(path), version))

    def _rooted(self, op: Op) -> Op:
        if isinstance(op, Create):
            return Create(self._full(op.path), op.data, op.ephemeral, op.sequence)
        if isinstance(op, SetData):
            return SetData(self._full(op.path), op.data, op.version)
        if isinstance(op, Delete):
            return Delete(self._full(op.path), op.version)
        return Check(self._full(op.path), op.version)

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        self._usable()
        results = self._server._transact([self._rooted(op) for op in ops], self._session_id)
        return [self._relative(result) if isinstance(result, str) else result for result in results]

    def multi_many(self, transactions: Sequence[Sequence[Op]]) -> list[list[OpResult] | ZkError]:
        outcomes: list[list[OpResult] | ZkError] = []
        for ops in transactions:
            try:
                outcomes.append(self.multi(ops))
            except MultiError as error:
                outcomes.append(error)
        return outcomes

    def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        found: list[tuple[bytes, Stat] | None] = []
        for path in paths:
            try:
                found.append(self.get(path))
            except NoNodeError:
                found.append(None)
        return found
