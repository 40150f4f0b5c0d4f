"""What strom needs from a ZooKeeper client, as a small interface with two implementations.

``KazooStore`` (``kazoo_store``) talks to a real ZooKeeper ensemble; ``MemoryZooKeeper``
(``memory_zookeeper``) is an in-memory stand-in with the same semantics that matter here —
versioned znodes, conditional writes, atomic multi-op transactions, ephemeral znodes owned by a
session, session expiry, one-shot watches — so the shell logic in ``zookeeper`` runs unchanged
against either, and unit tests need no server.

Errors are the ones ZooKeeper defines, as exceptions of this module whatever the implementation.
Watches are one-shot, as in ZooKeeper: a callback fires once, from the client's event thread (the
caller of the operation with the in-memory stand-in), and must not block; re-reading re-arms.
A watch outlives a lost connection as long as the session lives: when the connection comes back,
every watch set before it was lost fires once with ``RECONNECTED`` (ZooKeeper's server forgets the
watches of a connection, and kazoo does not set them again), so its owner reads again. A watch
dies with its session (after EXPIRED the owner starts over anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class ZkError(Exception):
    """A ZooKeeper operation failed."""


def zk_error_text(error: ZkError) -> str:
    """The error for a log line or an answer: its kind, and its message when it has one (kazoo's
    session expiry has none)."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


class NoNodeError(ZkError):
    """The znode (or, for create, its parent) does not exist."""


class NodeExistsError(ZkError):
    """create: the znode already exists."""


class BadVersionError(ZkError):
    """A conditional operation named a version the znode no longer has."""


class NotEmptyError(ZkError):
    """delete: the znode has children."""


class ConnectionLossError(ZkError):
    """The connection dropped: the outcome of the operation is unknown; the session may survive."""


class SessionExpiredError(ZkError):
    """The session is gone, and with it every ephemeral znode and watch it held."""


class ZkUnavailableError(ZkError):
    """No ZooKeeper server answered within the bounded connect wait."""


class MultiError(ZkError):
    """A transaction failed at operation ``index``; none of its operations took effect."""

    def __init__(self, index: int, cause: ZkError) -> None:
        super().__init__(f"operation {index} of the transaction failed: {type(cause).__name__} {cause}")
        self.index = index
        self.cause = cause


@dataclass(frozen=True)
class Stat:
    version: int  # data version: bumped by every set
    czxid: int  # zxid of the create: differs for every incarnation of a path
    mzxid: int
    ephemeral_owner: int  # session id owning an ephemeral znode, 0 for a persistent one
    num_children: int


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = -1  # -1: whatever the version


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int


Op = Create | SetData | Delete | Check
# A successful operation's result: the created path (Create), the new Stat (SetData), None otherwise.
OpResult = str | Stat | None


class SessionEvent(Enum):
    CONNECTED = "connected"  # (re)connected; after EXPIRED this is a new session
    SUSPENDED = "suspended"  # connection lost; the session lives on if it comes back in time
    EXPIRED = "expired"  # the session is over: its ephemerals and watches are gone


class WatchKind(Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILDREN = "children"
    # The connection was lost and came back within the session: the server forgot the watch
    # with the connection, so it fires now; what it watched may have changed meanwhile.
    RECONNECTED = "reconnected"


@dataclass(frozen=True)
class WatchEvent:
    kind: WatchKind
    path: str


Watch = Callable[[WatchEvent], None]
SessionListener = Callable[[SessionEvent], None]


class ZkStore(Protocol):
    """A connected ZooKeeper session, paths relative to its chroot."""

    @property
    def session_id(self) -> int: ...

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> str:
        """Create ``path`` (its parent must exist); returns the path (with the sequence suffix)."""
        ...

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and any missing parent as empty persistent znodes."""
        ...

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, Stat]: ...

    def exists(self, path: str, watch: Watch | None = None) -> Stat | None:
        """The znode's Stat or None; a watch fires on its creation, change or deletion."""
        ...

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]: ...

    def set(self, path: str, data: bytes, version: int = -1) -> Stat: ...

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run ``ops`` as one atomic transaction; MultiError names the operation that failed."""
        ...

    def multi_many(self, transactions: Sequence[Sequence[Op]]) -> list[list[OpResult] | ZkError]:
        """Several independent transactions, pipelined; each result or error in order.

        ConnectionLossError / SessionExpiredError are raised, not returned: the outcome of every
        transaction still outstanding is then unknown.
        """
        ...

    def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        """Read several znodes, pipelined; None for one that does not exist."""
        ...

    def add_listener(self, listener: SessionListener) -> None: ...

    def close(self) -> None:
        """End the session: its ephemeral znodes are deleted at once."""
        ...
