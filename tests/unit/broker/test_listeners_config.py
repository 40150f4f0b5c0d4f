"""Where the broker listens and what it advertises (listeners, advertised.listeners, the protocol
map, --host/--port), and which configuration keys it accepts: Kafka's keys it does not use are
accepted and listed, keys Kafka does not know are refused with the names meant."""

from __future__ import annotations

import re

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError, help_config_text
from strom.broker.kafka_broker_keys import KAFKA_BROKER_CONFIG_KEYS, is_kafka_broker_key
from strom.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    ListenerError,
    format_listener,
    parse_listeners,
    parse_port,
    parse_protocol_map,
)
from strom.cluster.model import Endpoint

PLAINTEXT = "PLAINTEXT"


def endpoint(name: str, host: str, port: int, protocol: str = PLAINTEXT) -> Endpoint:
    return Endpoint(name, host, port, protocol)


# -- parsing -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PLAINTEXT://127.0.0.1:19230", [endpoint(PLAINTEXT, "127.0.0.1", 19230)]),
        ("PLAINTEXT://:9092", [endpoint(PLAINTEXT, "", 9092)]),
        ("plaintext://localhost:0", [endpoint(PLAINTEXT, "localhost", 0)]),
        ("PLAINTEXT://[::1]:9092", [endpoint(PLAINTEXT, "::1", 9092)]),
        (
            " PLAINTEXT://127.0.0.1:9092 , SSL://:9093 ",
            [endpoint(PLAINTEXT, "127.0.0.1", 9092), endpoint("SSL", "", 9093, "SSL")],
        ),
        # An IPv4 and an IPv6 listener may share a port, as in Kafka.
        (
            "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092",
            [endpoint(PLAINTEXT, "127.0.0.1", 9092), endpoint("SSL", "::1", 9092, "SSL")],
        ),
    ],
)
def test_listeners_parse_kafkas_format(text: str, expected: list[Endpoint]) -> None:
    assert list(parse_listeners(text, DEFAULT_PROTOCOL_MAP)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:9092", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://127.0.0.1", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://127.0.0.1:port", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://127.0.0.1:99999", "port 99999 is out of range"),
        ("PLAINTEXT://127.0.0.1:65536", "port 65536 is out of range"),
        ("PLAINTEXT://127.0.0.1:-1", "port -1 is out of range"),
        (
            "INTERNAL://127.0.0.1:9092",
            "INTERNAL is neither a security protocol nor in listener.security.protocol.map",
        ),
        ("PLAINTEXT://a:9092,PLAINTEXT://b:9093", "PLAINTEXT appears more than once"),
        ("PLAINTEXT://a:9092,SSL://b:9092", "use the same port"),
    ],
)
def test_bad_listeners_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ListenerError, match=message):
        parse_listeners(text, DEFAULT_PROTOCOL_MAP)


def test_advertised_listeners_need_a_routable_host_and_a_port_but_may_repeat_ports() -> None:
    assert list(
        parse_listeners("PLAINTEXT://a:9092,SSL://a:9092", DEFAULT_PROTOCOL_MAP, advertised=True)
    ) == [
        endpoint(PLAINTEXT, "a", 9092),
        endpoint("SSL", "a", 9092, "SSL"),
    ]
    for text in ("PLAINTEXT://0.0.0.0:9092", "PLAINTEXT://:9092", "PLAINTEXT://[::]:9092"):
        with pytest.raises(ListenerError, match="advertise a routable host"):
            parse_listeners(text, DEFAULT_PROTOCOL_MAP, advertised=True)
    with pytest.raises(ListenerError, match=r"port 0 is out of range \(1\.\.65535\)"):
        parse_listeners("PLAINTEXT://a:0", DEFAULT_PROTOCOL_MAP, advertised=True)


def test_protocol_map() -> None:
    assert parse_protocol_map("") == DEFAULT_PROTOCOL_MAP
    assert parse_protocol_map("internal:plaintext, EXTERNAL:SSL") == {
        "INTERNAL": PLAINTEXT,
        "EXTERNAL": "SSL",
    }
    with pytest.raises(ListenerError, match="unknown security protocol 'TLS'"):
        parse_protocol_map("INTERNAL:TLS")
    with pytest.raises(ListenerError, match="is not NAME:PROTOCOL"):
        parse_protocol_map("INTERNAL")
    with pytest.raises(ListenerError, match="mapped twice"):
        parse_protocol_map("A:PLAINTEXT,a:SSL")


def test_ports_and_formatting() -> None:
    assert parse_port("0", "--port", allow_zero=True) == 0
    assert parse_port("65535", "--port", allow_zero=False) == 65535
    with pytest.raises(ListenerError, match="out of range"):
        parse_port("0", "advertised.port", allow_zero=False)
    with pytest.raises(ListenerError, match="is not a port number"):
        parse_port("http", "port", allow_zero=True)
    assert format_listener(endpoint(PLAINTEXT, "::1", 9092)) == "PLAINTEXT://[::1]:9092"
    assert format_listener(endpoint("INTERNAL", "h", 1)) == "INTERNAL://h:1"


# -- where the broker listens ---------------------------------------------------------------------------


def test_default_is_loopback_9092_and_host_port_flags_replace_it() -> None:
    assert BrokerConfig().listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 9092),)
    assert BrokerConfig(port=0).listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 0),)
    assert BrokerConfig(host="localhost", port=19092).advertised_listeners() == (
        endpoint(PLAINTEXT, "localhost", 19092),
    )


def test_listeners_key_is_honoured_and_the_flags_replace_its_first_entry() -> None:
    values = {
        "listeners": "INTERNAL://127.0.0.1:19230,EXTERNAL://127.0.0.2:19231",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    }
    assert BrokerConfig(values=values).listeners() == (
        endpoint("INTERNAL", "127.0.0.1", 19230),
        endpoint("EXTERNAL", "127.0.0.2", 19231),
    )
    assert BrokerConfig(port=29000, values=values).listeners()[0] == endpoint("INTERNAL", "127.0.0.1", 29000)
    assert BrokerConfig(host="localhost", values=values).listeners()[0] == endpoint(
        "INTERNAL", "localhost", 19230
    )


def test_deprecated_host_name_and_port_apply_when_listeners_is_unset() -> None:
    assert BrokerConfig(values={"port": "19093"}).listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 19093),)
    assert BrokerConfig(values={"host.name": "localhost", "port": "19093"}).listeners() == (
        endpoint(PLAINTEXT, "localhost", 19093),
    )
    with pytest.raises(BrokerConfigError, match="port 70000 is out of range"):
        BrokerConfig(values={"port": "70000"})


def test_controller_listeners_are_not_opened() -> None:
    # The listeners of Kafka's KRaft quickstart configuration.
    config = BrokerConfig(
        values={
            "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            "advertised.listeners": "PLAINTEXT://localhost:19092",
        }
    )
    assert config.listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 19092),)
    assert config.advertised_listeners() == (endpoint(PLAINTEXT, "localhost", 19092),)


def test_a_stock_kafka_4_server_properties_starts() -> None:
    """Kafka 4's config/server.properties (combined mode, addresses made 127.0.0.1): its controller
    listener advertised too, and share.coordinator.* keys (KIP-932), are Kafka's and not used."""
    config = BrokerConfig(
        values={
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
            "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
            "inter.broker.listener.name": "PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            "num.network.threads": "3",
            "offsets.topic.replication.factor": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "log.retention.hours": "168",
        }
    )
    assert config.listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 19092),)
    assert config.advertised_listeners() == (endpoint(PLAINTEXT, "localhost", 19092),)
    assert {
        "controller.quorum.bootstrap.servers",
        "process.roles",
        "share.coordinator.state.topic.min.isr",
        "share.coordinator.state.topic.replication.factor",
    } <= set(config.unused_kafka_keys())


def test_keys_of_kafka_features_strom_lacks_are_kafkas_but_a_typo_is_not() -> None:
    later = {"group.streams.session.timeout.ms": "45000", "remote.log.storage.system.enable": "false"}
    assert set(BrokerConfig(values=later).unused_kafka_keys()) == set(later)
    with pytest.raises(BrokerConfigError, match="unknown configuration key"):
        BrokerConfig(values={"shares.coordinator.threads": "1"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listeners": ","}, "names no listener"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092", "advertised.listeners": "OTHER://h:1"},
            "OTHER is neither",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "advertised.listeners": "SSL://h:1",
            },
            "listener SSL is not one the broker opens",
        ),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "needs the address clients should use"),
        (
            {
                "listeners": "CONTROLLER://127.0.0.1:9093",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            },
            "every listener is in controller.listener.names",
        ),
    ],
)
def test_listeners_strom_cannot_serve_are_refused_at_start(values: dict[str, str], message: str) -> None:
    with pytest.raises(BrokerConfigError, match=message):
        BrokerConfig(values=values)


def test_host_flag_on_every_interface_needs_an_advertised_address() -> None:
    with pytest.raises(BrokerConfigError, match=re.escape("advertised.listeners=PLAINTEXT://HOST:PORT")):
        BrokerConfig(host="0.0.0.0")
    config = BrokerConfig(
        host="0.0.0.0", port=9092, values={"advertised.listeners": "PLAINTEXT://broker.example:9092"}
    )
    assert config.advertised_listeners() == (endpoint(PLAINTEXT, "broker.example", 9092),)
    config = BrokerConfig(
        host="0.0.0.0", values={"advertised.host.name": "broker.example", "advertised.port": "19092"}
    )
    assert config.advertised_listeners() == (endpoint(PLAINTEXT, "broker.example", 19092),)


def test_advertised_endpoints_per_listener_and_the_port_a_listener_got() -> None:
    config = BrokerConfig(
        values={
            "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "advertised.listeners": "EXTERNAL://kafka.example.com:443",
        }
    )
    assert config.advertised_listeners({"INTERNAL": 40001, "EXTERNAL": 40002}) == (
        endpoint("INTERNAL", "127.0.0.1", 40001),
        endpoint("EXTERNAL", "kafka.example.com", 443),
    )


def test_an_empty_host_advertises_this_machines_name() -> None:
    import socket

    config = BrokerConfig(values={"listeners": "PLAINTEXT://:19092"})
    assert config.listeners() == (endpoint(PLAINTEXT, "", 19092),)
    assert config.advertised_listeners() == (endpoint(PLAINTEXT, socket.getfqdn(), 19092),)


# -- which keys -------------------------------------------------------------------------------------------

# The keys of the server.properties Kafka 3.x ships (ZooKeeper mode), with its values.
STOCK_SERVER_PROPERTIES = {
    "broker.id": "0",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "log.dirs": "/tmp/kafka-logs",
    "num.partitions": "1",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.retention.check.interval.ms": "300000",
    "zookeeper.connect": "localhost:2181",
    "zookeeper.connection.timeout.ms": "18000",
    "group.initial.rebalance.delay.ms": "0",
}


def test_a_stock_server_properties_is_accepted_and_the_unused_keys_are_named() -> None:
    config = BrokerConfig(values=STOCK_SERVER_PROPERTIES)
    assert config.unused_kafka_keys() == [
        "num.io.threads",
        "num.network.threads",
        "num.recovery.threads.per.data.dir",
        "socket.receive.buffer.bytes",
        "socket.send.buffer.bytes",
    ]
    # The ZooKeeper keys are strom's own now: set, they make the broker one of a cluster.
    assert config.is_set("zookeeper.connect")
    assert config.get_int("num.partitions") == 1
    assert config.listeners() == (endpoint(PLAINTEXT, "127.0.0.1", 9092),)


def test_per_listener_overrides_are_kafka_keys() -> None:
    assert is_kafka_broker_key("listener.name.internal.ssl.keystore.location")
    assert is_kafka_broker_key("listener.name.sasl_ssl.plain.sasl.jaas.config")
    assert not is_kafka_broker_key("listener.name.internal.no.such.key")
    assert not is_kafka_broker_key("num.io.thread")


@pytest.mark.parametrize(
    ("key", "suggested"),
    [
        ("num.partition", "num.partitions"),
        ("log.retention.hour", "log.retention.hours"),
        ("num.io.thread", "num.io.threads"),
        ("listener", "listeners"),
    ],
)
def test_a_typo_is_refused_with_the_names_meant(key: str, suggested: str) -> None:
    with pytest.raises(BrokerConfigError, match=rf"{key} \(did you mean [^)]*\b{suggested}\b"):
        BrokerConfig(values={key: "1"})


def test_a_key_nobody_knows_is_refused_without_guesses() -> None:
    with pytest.raises(
        BrokerConfigError, match=r"unknown configuration key\(s\): zzz\. strom broker --help-config"
    ):
        BrokerConfig(values={"zzz": "1"})


def test_the_list_of_kafka_keys_covers_what_strom_honours() -> None:
    from strom.broker.config import BROKER_CONFIG_KEYS

    assert len(KAFKA_BROKER_CONFIG_KEYS) >= 300
    # cluster.id lives in Kafka's meta.properties, not in its broker configs; super.users and
    # allow.everyone.if.no.acl.found are the ACL authorizer's own configs (documented with it, not in
    # the broker config table); every other key strom honours is Kafka's.
    assert set(BROKER_CONFIG_KEYS) - KAFKA_BROKER_CONFIG_KEYS == {
        "cluster.id",
        "super.users",
        "allow.everyone.if.no.acl.found",
    }
    assert "ignored, with one warning" in help_config_text()
