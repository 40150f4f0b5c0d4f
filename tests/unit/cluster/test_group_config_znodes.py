"""Group configs (KIP-848) of a cluster in ZooKeeper, on the in-memory stand-in: one znode per
group under ``/config/groups`` in Kafka's config format, a ``groups/<group>`` change notification
per change, every group read back, and znodes strom did not write left out."""

from __future__ import annotations

import json
import logging

import pytest

from strom.base.clock import ManualClock
from strom.cluster import znodes
from strom.cluster.memory_zookeeper import MemoryZooKeeper
from strom.cluster.zookeeper import ClusterZooKeeper

SESSION = {"consumer.session.timeout.ms": "50000"}
BOTH = {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "3000"}


def _zk() -> tuple[ClusterZooKeeper, ClusterZooKeeper]:
    """Two brokers' sessions on one ZooKeeper: the first made the layout."""
    server = MemoryZooKeeper()
    one = ClusterZooKeeper(server.connect("/c"), ManualClock())
    one.ensure_layout()
    return one, ClusterZooKeeper(server.connect("/c"), ManualClock())


# ---- the znode format ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group_id", "name"),
    [
        ("orders", "orders"),
        ("a/b c", "a%2Fb%20c"),  # URL-encoded as quota names are
        ("app.v2", "app.v2"),
        ("grüße", "gr%C3%BC%C3%9Fe"),
        (".", "%2E"),  # names ZooKeeper refuses as path steps
        ("..", "%2E%2E"),
    ],
)
def test_a_groups_znode_is_named_by_its_url_encoded_id(group_id: str, name: str) -> None:
    assert znodes.group_config_name(group_id) == name
    assert znodes.group_id_of(name) == group_id
    assert znodes.group_config_path(group_id) == f"/config/groups/{name}"
    assert znodes.group_config_entity_path(group_id) == f"groups/{name}"


def test_a_groups_configs_are_kept_in_kafkas_config_format() -> None:
    data = znodes.encode_group_config("orders", BOTH)
    assert json.loads(data) == {"version": 1, "config": BOTH}
    assert znodes.decode_group_config("orders", data) == BOTH
    assert znodes.decode_group_config("orders", b"") == {}  # a znode with no data holds none


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe",
        b"not json",
        b"[]",
        b'"text"',
        b'{"version":1,"config":[]}',
        b'{"version":1,"config":"consumer.session.timeout.ms=50000"}',
        b'{"version":1,"config":{"consumer.session.timeout.ms":50000}}',
        b'{"version":1,"config":{"consumer.session.timeout.ms":null}}',
    ],
)
def test_a_group_znode_that_is_not_a_config_is_refused_naming_its_path(data: bytes) -> None:
    with pytest.raises(znodes.ZnodeFormatError, match="/config/groups/a%2Fb"):
        znodes.decode_group_config("a/b", data)


# ---- ClusterZooKeeper ---------------------------------------------------------------------------------


def test_joining_makes_the_groups_path() -> None:
    one, _ = _zk()
    assert one.store.exists(znodes.CONFIG_GROUPS_PATH) is not None
    assert one.read_group_configs() == {}
    assert one.read_group_config("orders") == {}


def test_group_configs_are_written_read_back_and_notified_to_every_broker() -> None:
    one, two = _zk()
    seen = two.read_config_changes().last
    one.set_group_config("orders", SESSION)
    one.set_group_config("a/b c", BOTH)
    data, _ = one.store.get("/config/groups/a%2Fb%20c")
    assert json.loads(data) == {"version": 1, "config": BOTH}
    assert two.read_group_configs() == {"orders": SESSION, "a/b c": BOTH}
    assert two.read_group_config("a/b c") == BOTH
    assert two.read_group_config("payments") == {}

    changes = two.read_config_changes(after=seen)
    assert changes.groups == ("orders", "a/b c")
    assert (changes.topics, changes.users, changes.quotas) == ((), (), False)
    data, _ = two.store.get(f"/config/changes/{changes.last}")
    assert json.loads(data) == {"version": 2, "entity_path": "groups/a%2Fb%20c"}
    assert two.read_config_changes(after=changes.last).groups == ()


def test_a_write_replaces_the_groups_configs_and_an_empty_one_removes_its_znode() -> None:
    one, two = _zk()
    one.set_group_config("orders", BOTH)
    seen = two.read_config_changes().last
    two.set_group_config("orders", SESSION)  # through another broker: the whole set replaced
    one.set_group_config("orders", BOTH)
    assert one.read_group_config("orders") == BOTH
    one.set_group_config("orders", {})
    assert one.store.exists("/config/groups/orders") is None
    assert two.read_group_config("orders") == {}
    assert two.read_group_configs() == {}
    changes = two.read_config_changes(after=seen)
    assert changes.groups == ("orders",)  # three notifications, one group to read again
    # Removing the configs of a group that has none is no error, and still notified.
    one.set_group_config("payments", {})
    assert two.read_config_changes(after=changes.last).groups == ("payments",)


def test_writing_into_a_cluster_made_before_group_configs_makes_their_path() -> None:
    one, _ = _zk()
    one.store.delete(znodes.CONFIG_GROUPS_PATH)  # the layout of a strom without group configs
    assert one.read_group_configs() == {}
    one.set_group_config("orders", SESSION)
    assert one.read_group_configs() == {"orders": SESSION}


def test_other_changes_name_no_group() -> None:
    one, two = _zk()
    seen = two.read_config_changes().last
    one.set_topic_config("orders", {"retention.ms": "1"})
    one.set_client_quota((("client-id", "orders"),), {"producer_byte_rate": 1024.0})
    one.update_user_config("orders", {"SCRAM-SHA-512": "salt=..."})
    one.store.create(
        "/config/changes/config_change_", znodes.encode_entity_change("groups/a/b"), sequence=True
    )
    changes = two.read_config_changes(after=seen)
    assert changes.groups == ()
    assert (changes.topics, changes.users, changes.quotas) == (("orders",), ("orders",), True)


def test_a_group_znode_strom_cannot_read_is_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    one, two = _zk()
    one.set_group_config("orders", SESSION)
    one.store.create("/config/groups/broken", b'{"version":1,"config":{"consumer.session.timeout.ms":1}}')
    one.store.create("/config/groups/%41", json.dumps({"version": 1, "config": SESSION}).encode())
    with caplog.at_level(logging.WARNING, logger="strom.cluster.zookeeper"):
        assert two.read_group_configs() == {"orders": SESSION}
        assert two.read_group_config("broken") == {}
    assert "/config/groups/broken" in caplog.text
    assert "/config/groups/%41" in caplog.text  # "A" is named A: another znode
