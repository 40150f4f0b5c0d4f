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
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from strom.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Authorizer,
    ResourceType,
    binding_from_json,
    binding_to_json,
)
from strom.storage.files import write_file_atomically

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

log = logging.getLogger("strom.broker.acls")

ACL_FILE_NAME = "acls.json"
ACL_FILE_VERSION = 1


class AclStoreError(Exception):
    """The store could not be read or written; the message says what and where."""


class AclStore(Protocol):
    def load(self) -> list[AclBinding]:
        """Every binding stored (none if nothing was ever stored); raises AclStoreError."""
        ...

    def save(self, bindings: list[AclBinding]) -> None:
        """Replace what is stored by ``bindings``, durably; raises AclStoreError. Called from a
        worker thread, one call at a time."""
        ...


class FileAclStore:
    """The bindings as one JSON document in the data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACL_FILE_NAME

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
            return [binding_from_json(value) for value in document["acls"]]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise AclStoreError(f"{self.path} is not an ACL file strom wrote: {error}") from None

    def save(self, bindings: list[AclBinding]) -> None:
        document = {"version": ACL_FILE_VERSION, "acls": [binding_to_json(binding) for binding in bindings]}
        try:
            write_file_atomically(self.path, json.dumps(document, indent=1).encode())
        except OSError as error:
            raise AclStoreError(f"cannot write {self.path}: {error}") from None


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

    async def _save(self, bindings: set[AclBinding]) -> None:
        ordered = sorted(bindings, key=lambda binding: (tuple(binding.pattern), tuple(binding.entry)))
        await asyncio.to_thread(self.store.save, ordered)

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add valid ``bindings`` (already present ones are no error); raises AclStoreError."""
        async with self._lock:
            current = set(self.authorizer.bindings())
            wanted = current | set(bindings)
            if wanted != current:
                await self._save(wanted)
                for binding in wanted - current:
                    self.authorizer.add(binding)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter selects; per filter the bindings it removed (a binding two
        filters select is reported under both, as Kafka does). Raises AclStoreError."""
        async with self._lock:
            selected = [self.authorizer.matching(acl_filter) for acl_filter in filters]
            doomed = {binding for found in selected for binding in found}
            if doomed:
                await self._save(set(self.authorizer.bindings()) - doomed)
                for binding in doomed:
                    self.authorizer.remove(binding)
            return selected


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
