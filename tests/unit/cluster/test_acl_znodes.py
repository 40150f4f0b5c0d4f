"""The cluster's ACLs in ZooKeeper (Kafka's layout), on the in-memory stand-in: changes one
resource at a time, notifications, reading everything back."""

from __future__ import annotations

import pytest

from strom.base.clock import ManualClock
from strom.cluster import znodes
from strom.cluster.memory_zookeeper import MemoryZooKeeper
from strom.cluster.zookeeper import ClusterZooKeeper

ORDERS = ("Topic", "orders", znodes.ACL_PATTERN_LITERAL)
PAY = ("Topic", "pay", znodes.ACL_PATTERN_PREFIXED)
ALICE_READ = ("User:alice", "*", "Read", "Allow")
BOB_WRITE = ("User:bob", "10.0.0.1", "Write", "Deny")


def _zk() -> tuple[ClusterZooKeeper, ClusterZooKeeper]:
    server = MemoryZooKeeper()
    one = ClusterZooKeeper(server.connect("/c"), ManualClock())
    one.ensure_layout()
    return one, ClusterZooKeeper(server.connect("/c"), ManualClock())


def test_changes_are_written_per_resource_and_notified() -> None:
    one, two = _zk()
    seen = two.read_acl_changes(None, None)
    assert seen.resources == ()
    assert one.change_acls(ORDERS, {ALICE_READ}, ()) == {ALICE_READ}
    assert one.change_acls(PAY, {BOB_WRITE}, ()) == {BOB_WRITE}
    assert two.change_acls(ORDERS, {BOB_WRITE}, ()) == {ALICE_READ, BOB_WRITE}  # merged, not replaced
    changes = two.read_acl_changes(seen.last_literal, seen.last_extended)
    assert set(changes.resources) == {ORDERS, PAY}
    assert two.read_all_acls() == {ORDERS: {ALICE_READ, BOB_WRITE}, PAY: {BOB_WRITE}}
    # Nothing new since: nothing to read again.
    assert two.read_acl_changes(changes.last_literal, changes.last_extended).resources == ()
    # Removing the last entry removes the resource's znode.
    assert one.change_acls(PAY, (), {BOB_WRITE}) == frozenset()
    assert PAY not in one.read_all_acls()
    assert one.read_acls([PAY]) == {PAY: frozenset()}


def test_znode_formats_are_kafkas() -> None:
    assert znodes.acl_resource_path(ORDERS) == "/kafka-acl/Topic/orders"
    assert znodes.acl_resource_path(PAY) == "/kafka-acl-extended/prefixed/Topic/pay"
    assert znodes.decode_acls(ORDERS, znodes.encode_acls(ORDERS, frozenset({ALICE_READ}))) == {ALICE_READ}
    prefix, data = znodes.encode_acl_change(ORDERS)
    assert (prefix, data) == ("/kafka-acl-changes/acl_changes_", b"Topic:orders")
    assert znodes.decode_acl_change("/x", data, extended=False) == ORDERS
    prefix, data = znodes.encode_acl_change(PAY)
    assert prefix == "/kafka-acl-extended-changes/acl_changes_"
    assert znodes.decode_acl_change("/x", data, extended=True) == PAY
    with pytest.raises(znodes.ZnodeFormatError):
        znodes.decode_acls(ORDERS, b'{"version":1,"acls":[{"principal":"User:a"}]}')
