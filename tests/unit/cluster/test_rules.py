"""The pure rules: znode formats, the connect string, replica placement, leader election."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from strom.cluster import election, znodes
from strom.cluster.config import ZooKeeperConnect, ZooKeeperConnectError
from strom.cluster.model import NO_LEADER, BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment
from strom.cluster.placement import PlacementError, assign_replicas, rack_alternated, validate_assignment
from strom.protocol.errors import ErrorCode

# ---- znodes ----------------------------------------------------------------------------------------------


def test_broker_registration_json_is_kafkas() -> None:
    registration = BrokerRegistration(
        3,
        "10.0.0.3",
        9092,
        (Endpoint("PLAINTEXT", "10.0.0.3", 9092),),
        rack="r1",
        timestamp_ms=1_700_000_000_000,
    )
    value = json.loads(znodes.encode_broker(registration))
    assert value == {
        "version": 5,
        "host": "10.0.0.3",
        "port": 9092,
        "endpoints": ["PLAINTEXT://10.0.0.3:9092"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "jmx_port": -1,
        "timestamp": "1700000000000",
        "features": {},
        "rack": "r1",
    }
    assert znodes.decode_broker(3, znodes.encode_broker(registration), epoch=77) == registration.with_epoch(
        77
    )


def test_a_kafka_broker_znode_without_rack_or_host_decodes() -> None:
    data = b'{"listener_security_protocol_map":{"INTERNAL":"SSL"},"endpoints":["INTERNAL://[::1]:9093"],"jmx_port":-1,"host":null,"timestamp":"5","port":-1,"version":4}'
    broker = znodes.decode_broker(7, data, epoch=1)
    assert (broker.host, broker.port, broker.rack, broker.timestamp_ms) == ("[::1]", 9093, None, 5)
    assert broker.endpoints == (Endpoint("INTERNAL", "[::1]", 9093, "SSL"),)


def test_topic_and_partition_state_round_trip() -> None:
    topic_id = uuid.uuid4()
    assignment = TopicAssignment("orders", topic_id, {0: (1, 2, 3), 1: (2, 3, 1)}, version=4)
    raw = json.loads(znodes.encode_topic(assignment))
    assert raw["partitions"] == {"0": [1, 2, 3], "1": [2, 3, 1]}
    assert len(raw["topic_id"]) == 22 and raw["version"] == 3
    assert znodes.decode_topic("orders", znodes.encode_topic(assignment), 4) == assignment
    state = LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=9)
    assert json.loads(znodes.encode_partition_state("orders", 0, state)) == {
        "version": 1,
        "leader": 2,
        "leader_epoch": 5,
        "isr": [2, 3],
        "controller_epoch": 9,
    }
    assert (
        znodes.decode_partition_state("orders", 0, znodes.encode_partition_state("orders", 0, state)) == state
    )


def test_kafka_style_ids() -> None:
    value = uuid.UUID("5a2d2c0e-1a3b-4c5d-8e9f-0a1b2c3d4e5f")
    text = znodes.uuid_to_string(value)
    assert len(text) == 22 and "=" not in text
    assert znodes.uuid_from_string(text) == value
    cluster_id = znodes.new_cluster_id()
    assert len(cluster_id) == 22 and all(c.isalnum() or c in "-_" for c in cluster_id)


@pytest.mark.parametrize(
    ("decode", "data", "problem"),
    [
        (lambda d: znodes.decode_partition_state("t", 0, d), b"not json", "not JSON"),
        (lambda d: znodes.decode_partition_state("t", 0, d), b"[1]", "JSON object"),
        (
            lambda d: znodes.decode_partition_state("t", 0, d),
            b'{"leader":"1"}',
            "'leader' must be an integer",
        ),
        (
            lambda d: znodes.decode_partition_state("t", 0, d),
            b'{"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[true]}',
            "list of integers",
        ),
        (lambda d: znodes.decode_topic("t", d, 0), b'{"partitions":{}}', "topic_id"),
        (
            lambda d: znodes.decode_topic("t", d, 0),
            b'{"topic_id":"AAAAAAAAAAAAAAAAAAAAAA","partitions":{"1":[1]}}',
            "partitions must be 0..0",
        ),
        (lambda d: znodes.decode_controller_epoch(d), b"-3", "negative"),
        (lambda d: znodes.decode_controller_epoch(d), b"x", "not an integer"),
        (lambda d: znodes.decode_broker(1, d, 0), b'{"endpoints":["nothing"]}', "LISTENER://host:port"),
    ],
)
def test_malformed_znodes_are_refused_naming_the_path(decode, data: bytes, problem: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(znodes.ZnodeFormatError, match=problem):
        decode(data)


def test_an_oversized_znode_is_refused_before_writing() -> None:
    huge = TopicAssignment("t", uuid.uuid4(), {p: tuple(range(60)) for p in range(10_000)})
    with pytest.raises(znodes.ZnodeFormatError, match="bytes exceed"):
        znodes.encode_topic(huge)


def test_config_change_notification_names_its_topic() -> None:
    assert znodes.decode_config_change("/c", znodes.encode_config_change("t")) == "t"
    assert znodes.decode_config_change("/c", b'{"version":2,"entity_path":"clients/x"}') is None
    assert znodes.decode_topic_config("t", znodes.encode_topic_config("t", {"a": "1"})) == {"a": "1"}


# ---- the connect string ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts", "chroot"),
    [
        ("127.0.0.1:2181", (("127.0.0.1", 2181),), None),
        ("a:1,b:2/strom", (("a", 1), ("b", 2)), "/strom"),
        ("a:1/kafka/prod/", (("a", 1),), "/kafka/prod"),
        ("zk", (("zk", 2181),), None),
        ("[::1]:2182/x", (("::1", 2182),), "/x"),
        ("a:1/", (("a", 1),), None),
    ],
)
def test_connect_string(text: str, hosts: tuple[tuple[str, int], ...], chroot: str | None) -> None:
    parsed = ZooKeeperConnect.parse(text)
    assert parsed.hosts == hosts and parsed.chroot == chroot
    assert ZooKeeperConnect.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["", "a:1,,b:2", ":2181", "a:99999", "a:x", "a:1/b//c", "a:1/b/../c"])
def test_bad_connect_strings_say_why(text: str) -> None:
    with pytest.raises(ZooKeeperConnectError):
        ZooKeeperConnect.parse(text)


# ---- placement ---------------------------------------------------------------------------------------------


def test_leaders_and_followers_spread_evenly() -> None:
    brokers: dict[int, str | None] = {1: None, 2: None, 3: None, 4: None}
    assignment = assign_replicas(brokers, 12, 3, start_index=0, replica_shift=0)
    assert all(len(set(replicas)) == 3 for replicas in assignment.values())
    assert Counter(replicas[0] for replicas in assignment.values()) == {1: 3, 2: 3, 3: 3, 4: 3}
    assert Counter(r for replicas in assignment.values() for r in replicas) == {1: 9, 2: 9, 3: 9, 4: 9}
    # The second replica shifts every time the partitions wrap around: not always the neighbour.
    seconds = {assignment[p][1] for p in range(12) if assignment[p][0] == 1}
    assert len(seconds) > 1
    assert assign_replicas(brokers, 12, 3, start_index=0, replica_shift=0) == assignment, "deterministic"


def test_rack_aware_placement_puts_replicas_on_distinct_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assert rack_alternated(brokers) == [1, 3, 5, 2, 4, 6]
    for start in range(6):
        for shift in range(6):
            assignment = assign_replicas(brokers, 12, 3, start_index=start, replica_shift=shift)
            for replicas in assignment.values():
                assert len({brokers[r] for r in replicas}) == 3, (start, shift, replicas)
            assert Counter(r[0] for r in assignment.values()) == dict.fromkeys(range(1, 7), 2)


def test_rack_aware_with_more_replicas_than_racks_uses_every_rack_first() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas(brokers, 8, 3, start_index=1, replica_shift=2).values():
        assert {brokers[r] for r in replicas} == {"a", "b"} and len(set(replicas)) == 3


def test_racks_are_ignored_unless_every_broker_has_one() -> None:
    assignment = assign_replicas({1: "a", 2: None, 3: "b"}, 3, 2)
    assert all(len(set(replicas)) == 2 for replicas in assignment.values())


def test_added_partitions_continue_the_pattern() -> None:
    brokers: dict[int, str | None] = {1: None, 2: None, 3: None}
    whole = assign_replicas(brokers, 6, 2, start_index=1, replica_shift=1)
    first = assign_replicas(brokers, 4, 2, start_index=1, replica_shift=1)
    more = assign_replicas(brokers, 2, 2, start_index=1, replica_shift=1, first_partition=4)
    assert {**first, **more} == whole


@pytest.mark.parametrize(
    ("partitions", "factor", "error"),
    [
        (3, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
        (3, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        (0, 1, ErrorCode.INVALID_PARTITIONS),
        (10_001, 1, ErrorCode.INVALID_PARTITIONS),
    ],
)
def test_impossible_placements_are_refused(partitions: int, factor: int, error: ErrorCode) -> None:
    with pytest.raises(PlacementError) as refused:
        assign_replicas({1: None, 2: None, 3: None}, partitions, factor)
    assert refused.value.error is error


def test_explicit_assignments_are_validated() -> None:
    assert validate_assignment({1: [2, 1], 0: [1, 2]}, {1, 2}) == {0: (1, 2), 1: (2, 1)}
    for assignment, problem in [
        ({0: [1, 1]}, "twice"),
        ({0: [1, 9]}, "unregistered"),
        ({0: [1], 1: [1, 2]}, "same"),
        ({1: [1]}, "exactly"),
        ({}, "exactly"),
    ]:
        with pytest.raises(PlacementError, match=problem) as refused:
            validate_assignment(assignment, {1, 2})
        assert refused.value.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with pytest.raises(PlacementError, match="same"):
        validate_assignment({0: [1, 2]}, {1, 2}, replication_factor=3)
    assert validate_assignment({3: [1]}, {1}, first_partition=3) == {3: (1,)}


# ---- election ----------------------------------------------------------------------------------------------


def test_offline_election_takes_the_first_live_isr_replica_in_assignment_order() -> None:
    chosen = election.elect_offline((1, 2, 3), (3, 2), {2, 3}, unclean_allowed=False)
    assert chosen == election.Election(2, (3, 2))
    chosen = election.elect_offline((1, 2, 3), (1, 3), {2, 3}, unclean_allowed=False)
    assert chosen == election.Election(3, (3,))


def test_without_a_live_isr_member_unclean_decides() -> None:
    clean = election.elect_offline((1, 2, 3), (1, 2), {3}, unclean_allowed=False)
    assert clean == election.Election(NO_LEADER, (1, 2)), "the ISR is kept whole for a clean return"
    unclean = election.elect_offline((1, 2, 3), (1, 2), {3}, unclean_allowed=True)
    assert unclean == election.Election(3, (3,), unclean=True)
    assert election.elect_offline((1, 2), (1,), set(), unclean_allowed=True).leader == NO_LEADER


def test_new_partition_preferred_and_shutdown_elections() -> None:
    assert election.elect_for_new_partition((1, 2, 3), {2, 3}) == election.Election(2, (2, 3))
    assert election.elect_for_new_partition((1, 2), {3}) is None
    assert election.preferred_leader((1, 2), (2, 1), {1, 2}) == 1
    assert election.preferred_leader((1, 2), (2,), {1, 2}) is None, "out of the ISR"
    assert election.preferred_leader((1, 2), (2, 1), {2}) is None, "not live"
    moved = election.elect_for_shutdown((1, 2, 3), (1, 2, 3), {2, 3}, {1})
    assert moved == election.Election(2, (2, 3))
    assert election.elect_for_shutdown((1, 2), (1,), {2}, {1}) is None
