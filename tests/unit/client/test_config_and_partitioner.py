from __future__ import annotations

import random
import warnings

import pytest

from strom.client.config import ConsumerConfig, ProducerConfig, parse_bootstrap
from strom.client.errors import ConfigError
from strom.client.producer.partitioner import StickyPartitioner, murmur2, partition_for_key


def test_dict_and_keyword_settings_merge_and_convert() -> None:
    config = ProducerConfig.from_settings(
        {"bootstrap.servers": "h:1", "linger.ms": "7"}, acks="all", batch_size=10
    )
    assert (config.bootstrap_servers, config.linger_ms, config.acks, config.batch_size) == ("h:1", 7, -1, 10)


def test_unknown_key_names_the_closest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"lingerms.*linger\.ms"):
        ProducerConfig.from_settings(lingerms=3)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"acks": 1, "enable.idempotence": True}, "idempotence=true requires acks=all"),
        ({"max.in.flight.requests.per.connection": 6, "enable.idempotence": "true"}, "max.in.flight"),
        ({"retries": 0, "enable.idempotence": True}, "retries > 0"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"linger.ms": "soon"}, "integer"),
        ({"enable.idempotence": "maybe"}, "true or false"),
        ({"linger.ms": -1}, "negative"),
    ],
)
def test_bad_producer_values_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig.from_settings(settings)


def test_acks_one_allowed_without_idempotence() -> None:
    assert ProducerConfig.from_settings(acks=1, enable_idempotence=False).acks == 1


@pytest.mark.parametrize(
    "settings",
    [{"acks": 1}, {"acks": "0"}, {"retries": 0}, {"max.in.flight.requests.per.connection": 6}],
)
def test_idempotence_not_asked_for_turns_off_where_a_setting_conflicts(settings: dict[str, object]) -> None:
    """As in the Java client: the default idempotence gives way to a conflicting setting; only an
    explicit enable.idempotence=true together with one is an error (above)."""
    assert ProducerConfig.from_settings(settings).enable_idempotence is False


def test_idempotence_is_on_by_default_and_when_acks_is_all() -> None:
    assert ProducerConfig.from_settings().enable_idempotence is True
    assert ProducerConfig.from_settings(acks="all", retries=3).enable_idempotence is True


def test_consumer_choices() -> None:
    assert ConsumerConfig.from_settings(auto_offset_reset="none").auto_offset_reset == "none"
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset"):
        ConsumerConfig.from_settings(auto_offset_reset="middle")
    assert ConsumerConfig.from_settings({"group.id": "g", "enable.auto.commit": "false"}).group_id == "g"


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap("a:1, [::1]:2,PLAINTEXT://b:3") == [("a", 1), ("::1", 2), ("b", 3)]
    with pytest.raises(ConfigError):
        parse_bootstrap("a:notaport")


# Values Java's Utils.murmur2 returns (Kafka's own unit test uses these inputs).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2.items())
def test_murmur2_matches_java(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_agrees_with_kafka_python_on_random_keys() -> None:
    with warnings.catch_warnings():  # kafka-python's import uses a deprecated importlib API
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    generator = random.Random(3)
    for length in range(0, 64):
        key = generator.randbytes(length)
        assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_partition_for_key_is_positive_modulo() -> None:
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_sticky_partitioner_moves_to_a_different_partition() -> None:
    partitioner = StickyPartitioner(random.Random(1))
    first = partitioner.next_partition("t", 5)
    for _ in range(20):
        following = partitioner.next_partition("t", 5)
        assert following != first
        first = following
    assert partitioner.next_partition("single", 1) == 0
