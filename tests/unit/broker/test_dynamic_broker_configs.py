"""Dynamic broker configs: AlterConfigs / IncrementalAlterConfigs on the BROKER resource change the
defaults of topic configs while the broker runs, persist them, and DescribeConfigs shows where
each value comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.broker.config import (
    DYNAMIC_CONFIGS_FILE_NAME,
    BrokerConfig,
    BrokerConfigError,
    load_dynamic_configs,
    with_persisted_dynamic_configs,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_configs import AlterConfigsRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic

BROKER = 4
TOPIC = 2
SET, DELETE, APPEND = 0, 1, 2
SOURCE_TOPIC, SOURCE_BROKER, SOURCE_CLUSTER_DEFAULT, SOURCE_STATIC, SOURCE_DEFAULT = 1, 2, 3, 4, 5


def alter(
    broker: InProcessBroker, name: str, *changes: tuple[str, int, str | None], validate_only: bool = False
) -> tuple[int, str | None]:
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=BROKER,
                resource_name=name,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(name=key, config_operation=op, value=value)
                    for key, op, value in changes
                ],
            )
        ],
        validate_only=validate_only,
    )
    [response] = broker.call(request, 1).responses
    return response.error_code, response.error_message


def describe(
    broker: InProcessBroker, resource_type: int, name: str
) -> dict[str, tuple[str | None, int, bool, list[tuple[str, int]]]]:
    """name -> (value, source, read_only, synonyms as (name, source))."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=True,
    )
    [result] = broker.call(request, 4).results
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {
        c.name: (c.value, c.config_source, c.read_only, [(s.name, s.source) for s in c.synonyms])
        for c in result.configs
    }


def test_broker_resource_says_which_keys_are_dynamic(broker: InProcessBroker) -> None:
    configs = describe(broker, BROKER, "0")
    assert configs["log.retention.ms"][2] is False
    assert configs["message.max.bytes"][2] is False
    assert configs["num.partitions"][2] is True
    assert configs["log.retention.hours"][:2] == ("168", SOURCE_DEFAULT)
    assert describe(broker, BROKER, "") == {}


def test_set_for_this_broker_applies_to_topics_without_an_override(broker: InProcessBroker) -> None:
    create_topic(broker, "plain")
    create_topic(broker, "own", **{"retention.ms": "1000"})
    assert alter(broker, "0", ("log.retention.ms", SET, "3600000")) == (ErrorCode.NONE, None)
    broker_side = describe(broker, BROKER, "0")["log.retention.ms"]
    assert broker_side[:2] == ("3600000", SOURCE_BROKER)
    assert broker_side[3][0] == ("log.retention.ms", SOURCE_BROKER)
    plain = describe(broker, TOPIC, "plain")["retention.ms"]
    assert plain[:2] == ("3600000", SOURCE_BROKER)
    assert plain[3][:2] == [("log.retention.ms", SOURCE_BROKER), ("log.retention.hours", SOURCE_DEFAULT)]
    assert describe(broker, TOPIC, "own")["retention.ms"][:2] == ("1000", SOURCE_TOPIC)
    # The partition logs run with it too, not only the description.
    assert broker.server.state.logs.log("plain", 0).config.retention_ms == 3_600_000  # type: ignore[union-attr]
    assert broker.server.state.logs.log("own", 0).config.retention_ms == 1000  # type: ignore[union-attr]
    # A topic created afterwards starts from it.
    create_topic(broker, "later")
    assert describe(broker, TOPIC, "later")["retention.ms"][0] == "3600000"


def test_cluster_default_is_below_this_brokers_own_value(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    assert alter(broker, "", ("message.max.bytes", SET, "5000"))[0] == ErrorCode.NONE
    assert describe(broker, BROKER, "") == {
        "message.max.bytes": (
            "5000",
            SOURCE_CLUSTER_DEFAULT,
            False,
            [("message.max.bytes", SOURCE_CLUSTER_DEFAULT)],
        )
    }
    assert describe(broker, TOPIC, "t")["max.message.bytes"][:2] == ("5000", SOURCE_CLUSTER_DEFAULT)
    assert alter(broker, "0", ("message.max.bytes", SET, "7000"))[0] == ErrorCode.NONE
    value, source, _, synonyms = describe(broker, BROKER, "0")["message.max.bytes"]
    assert (value, source) == ("7000", SOURCE_BROKER)
    assert synonyms == [
        ("message.max.bytes", SOURCE_BROKER),
        ("message.max.bytes", SOURCE_CLUSTER_DEFAULT),
        ("message.max.bytes", SOURCE_DEFAULT),
    ]
    assert describe(broker, TOPIC, "t")["max.message.bytes"][:2] == ("7000", SOURCE_BROKER)
    assert alter(broker, "0", ("message.max.bytes", DELETE, None))[0] == ErrorCode.NONE
    assert describe(broker, TOPIC, "t")["max.message.bytes"][:2] == ("5000", SOURCE_CLUSTER_DEFAULT)


def test_dynamic_value_wins_over_the_static_one(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data", {"log.segment.bytes": "2000000"})
    try:
        create_topic(broker, "t")
        assert describe(broker, TOPIC, "t")["segment.bytes"][:2] == ("2000000", SOURCE_STATIC)
        assert alter(broker, "0", ("log.segment.bytes", SET, "3000000"))[0] == ErrorCode.NONE
        assert describe(broker, TOPIC, "t")["segment.bytes"][:2] == ("3000000", SOURCE_BROKER)
        synonyms = describe(broker, BROKER, "0")["log.segment.bytes"][3]
        assert synonyms[:2] == [("log.segment.bytes", SOURCE_BROKER), ("log.segment.bytes", SOURCE_STATIC)]
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("num.partitions", SET, "3"), "cannot update these configs dynamically: num.partitions"),
        (("auto.create.topics.enable", DELETE, None), "cannot update these configs dynamically"),
        (("no.such.key", SET, "1"), "unknown broker config"),
        (("log.retention.ms", SET, "soon"), "not an integer"),
        (("log.cleanup.policy", SET, "shred"), "cleanup.policy"),
    ],
)
def test_refused_changes_leave_everything_as_it_was(
    broker: InProcessBroker, change: tuple[str, int, str | None], message: str
) -> None:
    create_topic(broker, "t")
    before = describe(broker, BROKER, "0")
    error, text = alter(broker, "0", ("log.retention.ms", SET, "1234"), change)
    assert error == ErrorCode.INVALID_REQUEST
    assert text is not None and message in text
    assert describe(broker, BROKER, "0") == before
    assert not (broker.config.data_dir / DYNAMIC_CONFIGS_FILE_NAME).exists()


def test_another_brokers_resource_is_refused(broker: InProcessBroker) -> None:
    assert alter(broker, "7", ("log.retention.ms", SET, "1"))[0] == ErrorCode.INVALID_REQUEST


def test_validate_only_changes_nothing(broker: InProcessBroker) -> None:
    assert alter(broker, "0", ("log.retention.ms", SET, "1"), validate_only=True)[0] == ErrorCode.NONE
    assert describe(broker, BROKER, "0")["log.retention.ms"][1] == SOURCE_DEFAULT


def test_append_to_the_cleanup_policy_list(broker: InProcessBroker) -> None:
    assert alter(broker, "", ("log.cleanup.policy", APPEND, "compact"))[0] == ErrorCode.NONE
    assert describe(broker, BROKER, "0")["log.cleanup.policy"][:2] == (
        "delete,compact",
        SOURCE_CLUSTER_DEFAULT,
    )


def test_alter_configs_replaces_the_whole_layer(broker: InProcessBroker) -> None:
    assert (
        alter(broker, "0", ("log.retention.ms", SET, "1000"), ("log.segment.bytes", SET, "2000000"))[0] == 0
    )

    def replace(entries: dict[str, str]) -> int:
        request = AlterConfigsRequest(
            resources=[
                AlterConfigsRequest.AlterConfigsResource(
                    resource_type=BROKER,
                    resource_name="0",
                    configs=[
                        AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in entries.items()
                    ],
                )
            ]
        )
        return int(broker.call(request, 1).responses[0].error_code)

    assert replace({"log.retention.bytes": "100000"}) == ErrorCode.NONE
    configs = describe(broker, BROKER, "0")
    assert configs["log.retention.bytes"][:2] == ("100000", SOURCE_BROKER)
    assert configs["log.retention.ms"][1] == SOURCE_DEFAULT
    assert configs["log.segment.bytes"][1] == SOURCE_DEFAULT
    assert replace({"delete.topic.enable": "false"}) == ErrorCode.INVALID_REQUEST


def test_dynamic_configs_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = InProcessBroker(data_dir)
    try:
        create_topic(first, "t")
        assert alter(first, "0", ("log.retention.ms", SET, "60000"))[0] == ErrorCode.NONE
        assert alter(first, "", ("message.max.bytes", SET, "9999"))[0] == ErrorCode.NONE
    finally:
        first.close()
    second = InProcessBroker(data_dir)
    try:
        configs = describe(second, TOPIC, "t")
        assert configs["retention.ms"][:2] == ("60000", SOURCE_BROKER)
        assert configs["max.message.bytes"][:2] == ("9999", SOURCE_CLUSTER_DEFAULT)
        assert second.server.state.logs.log("t", 0).config.max_message_bytes == 9999  # type: ignore[union-attr]
    finally:
        second.close()


def test_a_damaged_dynamic_config_file_never_stops_the_broker(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / DYNAMIC_CONFIGS_FILE_NAME
    path.write_text(
        json.dumps(
            {
                "default": {"log.retention.ms": "5000", "num.partitions": "3", "message.max.bytes": "x"},
                "brokers": {"0": {"log.segment.bytes": "2000000"}, "1": {"log.segment.bytes": "1"}},
            }
        )
    )
    dynamic, messages = load_dynamic_configs(data_dir, 0)
    assert dict(dynamic.default) == {"log.retention.ms": "5000"}
    assert dict(dynamic.broker) == {"log.segment.bytes": "2000000"}
    assert len(messages) == 2 and any("num.partitions" in line for line in messages)
    config, _ = with_persisted_dynamic_configs(BrokerConfig(data_dir=data_dir))
    assert config.get_int("log.segment.bytes") == 2_000_000
    path.write_text("{not json")
    config, messages = with_persisted_dynamic_configs(BrokerConfig(data_dir=data_dir))
    assert not config.dynamic_default and not config.dynamic_broker
    assert messages and "unreadable" in messages[0]


def test_broker_config_refuses_read_only_keys_in_a_dynamic_layer() -> None:
    with pytest.raises(BrokerConfigError, match="dynamically"):
        BrokerConfig(dynamic_broker={"num.partitions": "4"})


def test_kafkas_dynamic_keys_strom_does_not_use_are_kept_shown_and_inert(tmp_path: Path) -> None:
    """librdkafka's own admin test sets sasl.kerberos.min.time.before.relogin on a broker and expects
    NO_ERROR, as Kafka answers: kept in the dynamic layer, shown, without effect; a per-broker key
    is refused on the cluster-wide default, as Kafka refuses it; a Kafka key whose effect strom
    does not give (compression.type, max.connections) is refused rather than kept."""
    data_dir = tmp_path / "data"
    first = InProcessBroker(data_dir)
    try:
        assert alter(first, "0", ("sasl.kerberos.min.time.before.relogin", SET, "58000")) == (
            ErrorCode.NONE,
            None,
        )
        assert alter(first, "", ("num.io.threads", SET, "16")) == (ErrorCode.NONE, None)
        code, message = alter(first, "", ("sasl.kerberos.min.time.before.relogin", SET, "1"))
        assert (
            code == ErrorCode.INVALID_REQUEST
            and message is not None
            and "broker id must be specified" in message
        )
        for key in ("compression.type", "max.connections"):
            code, message = alter(first, "0", (key, SET, "1"))
            assert (
                code == ErrorCode.INVALID_REQUEST
                and message is not None
                and "unknown broker config" in message
            )
        configs = describe(first, BROKER, "0")
        assert configs["sasl.kerberos.min.time.before.relogin"][:3] == ("58000", SOURCE_BROKER, False)
        assert configs["num.io.threads"][:2] == ("16", SOURCE_CLUSTER_DEFAULT)
        assert describe(first, BROKER, "")["num.io.threads"][:2] == ("16", SOURCE_CLUSTER_DEFAULT)
    finally:
        first.close()
    second = InProcessBroker(data_dir)
    try:
        assert describe(second, BROKER, "0")["sasl.kerberos.min.time.before.relogin"][:2] == (
            "58000",
            SOURCE_BROKER,
        )
        assert (
            alter(second, "0", ("sasl.kerberos.min.time.before.relogin", DELETE, None))[0] == ErrorCode.NONE
        )
        assert "sasl.kerberos.min.time.before.relogin" not in describe(second, BROKER, "0")
    finally:
        second.close()
