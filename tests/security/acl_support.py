"""Brokers with authorization on, for the ACL tests, and ways to give principals ACLs.

Until SASL is merged every connection is ``User:ANONYMOUS``, a principal like any other: a test
broker is started first with ANONYMOUS as its super user, the topics and ACLs a test needs are made
through the real admin APIs (CreateTopics, CreateAcls: the ACLs are written to the data directory),
and the broker is restarted without super users, so that ANONYMOUS has exactly the ACLs given
(which also shows that ACLs survive a restart). ``principal`` is a parameter everywhere: once
clients can authenticate, the same helpers serve ``User:alice``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.compat.conftest import BrokerProcess

ANONYMOUS = "User:ANONYMOUS"
ADMIN_TIMEOUT_S = 30.0


class Acl(NamedTuple):
    """One ACL binding, in the words of kafka-acls."""

    resource_type: str  # "topic", "group", "cluster", "transactional_id"
    name: str
    operation: str  # "read", "write", "all", ...
    permission: str = "allow"
    pattern: str = "literal"  # or "prefixed"
    principal: str = ANONYMOUS
    host: str = "*"

    def confluent(self) -> AclBinding:
        return AclBinding(
            ResourceType[self.resource_type.upper()],
            self.name,
            ResourcePatternType[self.pattern.upper()],
            self.principal,
            self.host,
            AclOperation[self.operation.upper()],
            AclPermissionType[self.permission.upper()],
        )


def authorizing_settings(super_users: str = "", **extra: str) -> dict[str, str]:
    return {"authorizer.class.name": "strom", "super.users": super_users, **extra}


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_acls(broker: BrokerProcess, acls: Iterable[Acl]) -> None:
    acls = list(acls)
    if not acls:
        return
    client = admin(broker)  # kept until the answers are in: a dropped client fails its futures
    futures = client.create_acls([acl.confluent() for acl in acls], request_timeout=ADMIN_TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def create_topics(broker: BrokerProcess, names: Iterable[str], partitions: int = 1) -> None:
    names = list(names)
    if not names:
        return
    client = admin(broker)
    futures = client.create_topics(
        [NewTopic(name, partitions, 1) for name in names], request_timeout=ADMIN_TIMEOUT_S
    )
    for future in futures.values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def start_authorizing_broker(
    work_dir: Path,
    acls: Iterable[Acl],
    topics: Iterable[str] = (),
    bootstrap_principal: str = ANONYMOUS,
    prepare: Callable[[BrokerProcess], None] | None = None,
    **settings: str,
) -> BrokerProcess:
    """A broker with authorization on whose ACLs are ``acls`` and which holds ``topics``, made
    while ``bootstrap_principal`` was its super user (then taken away by a restart); ``prepare``
    does anything else while it is (groups, records). The caller closes it."""
    work_dir.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(work_dir, authorizing_settings(bootstrap_principal, **settings))
    try:
        broker.start()
        create_topics(broker, topics)
        create_acls(broker, acls)
        if prepare is not None:
            prepare(broker)
        broker.stop()
        broker.settings["super.users"] = ""
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker
