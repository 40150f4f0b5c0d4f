"""The broker's side of ACLs: where the bindings are kept, and the checks handlers make.

``BrokerState.authorizer`` is None when ``authorizer.class.name`` is empty: then every handler
checks that one attribute and nothing else. Otherwise it is a ``strom.security.acl.Authorizer``
holding every binding, and ``BrokerState.acls`` (an ``AclService``) changes them: a change is
written to the store first (one at a time, off the event loop), then applied, so what a client was
told was created survives a crash.

The store of a single node is a JSON file in the data directory (``acls.json``), written
atomically (temporary file, fsync, rename, fsync of the directory) and read at start. Another
store (ZooKeeper's ``/kafka-acl`` tree for a cluster) implements ``AclStore``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from strom.broker.refused import Refused
from strom.cluster.znodes import AclEntryText, AclResourceKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_from_json,
    binding_to_json,
    invalid_binding_reason,
)
from strom.storage.files import write_file_atomically

if TYPE_CHECKING:
    from strom.broker.cluster.runtime import ClusterReplication
    from strom.broker.context import RequestContext

log = logging.getLogger("strom.broker.acls")

ACL_FILE_NAME = "acls.json"
ACL_FILE_VERSION = 1


class AclStoreError(Exception):
    """The store could not be read or written; the message says what and where."""


class AclStore(Protocol):
    def load(self) -> list[AclBinding]:
        """Every binding stored (none if nothing was ever stored); raises AclStoreError. Called
        once, at start, before the event loop serves anyone."""
        ...

    async def apply(self, added: set[AclBinding], removed: set[AclBinding]) -> None:
        """Store the change durably (on the event loop, one call at a time); raises
        AclStoreError, or Refused when a cluster's ZooKeeper could not take it."""
        ...


class FileAclStore:
    """The bindings as one JSON document in the data directory, rewritten whole on every change
    (in a worker thread)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACL_FILE_NAME
        self._stored: frozenset[AclBinding] = frozenset()

    def load(self) -> list[AclBinding]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as error:
            raise AclStoreError(f"cannot read {self.path}: {error}") from None
        try:
            document = json.loads(text)
            if document.get("version") != ACL_FILE_VERSION:
                raise ValueError(f"version {document.get('version')!r}, this broker reads {ACL_FILE_VERSION}")
            bindings = [binding_from_json(value) for value in document["acls"]]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise AclStoreError(f"{self.path} is not an ACL file strom wrote: {error}") from None
        self._stored = frozenset(bindings)
        return bindings

    async def apply(self, added: set[AclBinding], removed: set[AclBinding]) -> None:
        wanted = (self._stored | added) - removed
        await asyncio.to_thread(self._write, sorted(wanted, key=_order))
        self._stored = wanted

    def _write(self, bindings: list[AclBinding]) -> None:
        document = {"version": ACL_FILE_VERSION, "acls": [binding_to_json(binding) for binding in bindings]}
        try:
            write_file_atomically(self.path, json.dumps(document, indent=1).encode())
        except OSError as error:
            raise AclStoreError(f"cannot write {self.path}: {error}") from None


def _order(binding: AclBinding) -> tuple[object, ...]:
    return (*binding.pattern, *binding.entry)


# -- a cluster: the ACLs in ZooKeeper, in Kafka's layout (strom.cluster.znodes) -------------------

_ZK_RESOURCE_TYPES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_ZK_RESOURCE_TYPES_BACK = {text: resource_type for resource_type, text in _ZK_RESOURCE_TYPES.items()}
_ZK_PERMISSIONS = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
_ZK_PERMISSIONS_BACK = {text: permission for permission, text in _ZK_PERMISSIONS.items()}


def _zk_operation(operation: AclOperation) -> str:
    """Kafka's spelling in ZooKeeper: Read, ClusterAction, IdempotentWrite."""
    return "".join(part.capitalize() for part in operation.name.split("_"))


_ZK_OPERATIONS_BACK = {_zk_operation(operation): operation for operation in AclOperation}


def zk_resource_key(pattern: ResourcePattern) -> AclResourceKey:
    return (_ZK_RESOURCE_TYPES[pattern.resource_type], pattern.name, pattern.pattern_type.name)


def zk_entry(entry: AccessControlEntry) -> AclEntryText:
    return (entry.principal, entry.host, _zk_operation(entry.operation), _ZK_PERMISSIONS[entry.permission])


def bindings_from_zk(
    key: AclResourceKey, entries: frozenset[AclEntryText]
) -> tuple[ResourcePattern, list[AclBinding]]:
    """The pattern of ``key`` and the valid bindings of its entries (one strom cannot read is
    logged and left out: another tool may have written it)."""
    resource_type, name, pattern_type = key
    pattern = ResourcePattern(
        _ZK_RESOURCE_TYPES_BACK.get(resource_type, ResourceType.UNKNOWN),
        name,
        PatternType[pattern_type] if pattern_type in PatternType.__members__ else PatternType.UNKNOWN,
    )
    bindings = []
    for principal, host, operation, permission in entries:
        binding = AclBinding(
            pattern,
            AccessControlEntry(
                principal,
                host,
                _ZK_OPERATIONS_BACK.get(operation, AclOperation.UNKNOWN),
                _ZK_PERMISSIONS_BACK.get(permission, AclPermissionType.UNKNOWN),
            ),
        )
        reason = invalid_binding_reason(binding)
        if reason is None:
            bindings.append(binding)
        else:
            log.warning(
                "ignoring an ACL in ZooKeeper (%s): %s %s",
                reason,
                key,
                (principal, host, operation, permission),
            )
    return pattern, bindings


class ZooKeeperAclStore:
    """The cluster's ACLs in ZooKeeper: a change is written one resource at a time (conditional
    on the version read) and notified to every broker, which reads the resource again
    (``AclService.apply_from_cluster``)."""

    def __init__(self, cluster: ClusterReplication) -> None:
        self.cluster = cluster

    def load(self) -> list[AclBinding]:
        return []  # they come when the broker joins the cluster (apply_from_cluster, whole)

    async def apply(self, added: set[AclBinding], removed: set[AclBinding]) -> None:
        for binding in added:
            if "/" in binding.pattern.name:
                # A znode's name cannot hold one (it would be a path of several znodes).
                raise Refused(
                    ErrorCode.INVALID_REQUEST,
                    f"{binding.pattern.name!r}: a resource name with '/' cannot be kept in ZooKeeper",
                )
        changes: dict[AclResourceKey, tuple[set[AclEntryText], set[AclEntryText]]] = {}
        for binding in added:
            changes.setdefault(zk_resource_key(binding.pattern), (set(), set()))[0].add(
                zk_entry(binding.entry)
            )
        for binding in removed:
            changes.setdefault(zk_resource_key(binding.pattern), (set(), set()))[1].add(
                zk_entry(binding.entry)
            )
        for key, (adding, removing) in changes.items():
            await self.cluster.change_acls(key, adding, removing)


class AclService:
    """Changes the authorizer's bindings through the store, one change at a time."""

    def __init__(self, authorizer: Authorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store
        self._lock = asyncio.Lock()

    def load(self) -> None:
        bindings = self.store.load()
        self.authorizer.replace_all(bindings)
        log.info("loaded %d ACL bindings", len(bindings))

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add valid ``bindings`` (already present ones are no error); raises AclStoreError (or
        Refused, from a cluster's ZooKeeper)."""
        async with self._lock:
            new = set(bindings) - self.authorizer.bindings()
            if new:
                await self.store.apply(new, set())
                for binding in new:
                    self.authorizer.add(binding)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter selects; per filter the bindings it removed (a binding two
        filters select is reported under both, as Kafka does). Raises as ``create``."""
        async with self._lock:
            selected = [self.authorizer.matching(acl_filter) for acl_filter in filters]
            doomed = {binding for found in selected for binding in found}
            if doomed:
                await self.store.apply(set(), doomed)
                for binding in doomed:
                    self.authorizer.remove(binding)
            return selected

    def apply_from_cluster(self, acls: Mapping[AclResourceKey, frozenset[AclEntryText]], whole: bool) -> None:
        """What ZooKeeper holds now: every ACL (``whole``), or the resources a change named."""
        if whole:
            found = [
                binding for key, entries in acls.items() for binding in bindings_from_zk(key, entries)[1]
            ]
            self.authorizer.replace_all(found)
            log.info("loaded %d ACL bindings from ZooKeeper", len(found))
            return
        for key, entries in acls.items():
            pattern, bindings = bindings_from_zk(key, entries)
            wanted = set(bindings)
            for entry in self.authorizer.entries_of(pattern):
                binding = AclBinding(pattern, entry)
                if binding not in wanted:
                    self.authorizer.remove(binding)
            for binding in wanted:
                self.authorizer.add(binding)


def allowed(context: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may perform ``operation`` on the resource (always, with
    authorization off). For one check per request; a handler checking many resources takes
    ``context.broker.authorizer`` once and asks it."""
    authorizer = context.broker.authorizer
    return authorizer is None or authorizer.authorize(
        context.principal, context.client_host, operation, resource_type, name
    )


def cluster_allowed(context: RequestContext, operation: AclOperation) -> bool:
    return allowed(context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def topic_allowed(context: RequestContext, operation: AclOperation, name: str) -> bool:
    return allowed(context, operation, ResourceType.TOPIC, name)
