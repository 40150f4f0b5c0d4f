"""Group configs (config resource GROUP, KIP-848) through DescribeConfigs, IncrementalAlterConfigs
and AlterConfigs on a single node: Kafka's answers, kept in the data directory across a restart,
and given to the group coordinator."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.group_configs import GROUP_CONFIGS_FILE_NAME, FileGroupConfigStore, GroupConfigFileError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_configs import AlterConfigsRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.unit.broker.conftest import InProcessBroker

GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
BOUNDS = {"group.consumer.max.session.timeout.ms": "120000"}


def describe(broker: InProcessBroker, group_id: str, version: int = 4) -> dict[str, tuple[str | None, int]]:
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=GROUP, resource_name=group_id)
        ],
        include_synonyms=True,
    )
    result = broker.call(request, version).results[0]
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def alter(
    broker: InProcessBroker, group_id: str, *changes: tuple[str, int, str | None], validate_only: bool = False
) -> tuple[int, str | None]:
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=GROUP,
                resource_name=group_id,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=name, config_operation=operation, value=value
                    )
                    for name, operation, value in changes
                ],
            )
        ],
        validate_only=validate_only,
    )
    response = broker.call(request, 1).responses[0]
    assert (response.resource_type, response.resource_name) == (GROUP, group_id)
    return response.error_code, response.error_message


def test_a_group_without_configs_shows_the_broker_defaults(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data", {"group.consumer.heartbeat.interval.ms": "6000"})
    try:
        # Any group id, whether the group exists or not, as Kafka answers.
        assert describe(broker, "no-such-group") == {HEARTBEAT: ("6000", 5), SESSION: ("45000", 5)}
    finally:
        broker.close()


def test_set_describe_delete_and_keep_across_a_restart(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data", BOUNDS)
    try:
        assert alter(broker, "g", (SESSION, SET, "50000"), validate_only=True) == (ErrorCode.NONE, None)
        assert describe(broker, "g")[SESSION] == ("45000", 5)  # validate_only changed nothing
        assert alter(broker, "g", (SESSION, SET, "50000"), (HEARTBEAT, SET, " 7000 ")) == (
            ErrorCode.NONE,
            None,
        )
        assert describe(broker, "g") == {HEARTBEAT: ("7000", 8), SESSION: ("50000", 8)}
        assert describe(broker, "other")[SESSION] == ("45000", 5)
        runtime = broker.server.state.groups.coordinator._runtime
        assert (runtime.consumer_session_timeout_ms("g"), runtime.consumer_heartbeat_interval_ms("g")) == (
            50_000,
            7_000,
        )
        assert alter(broker, "g", (HEARTBEAT, DELETE, None)) == (ErrorCode.NONE, None)
        assert describe(broker, "g") == {HEARTBEAT: ("5000", 5), SESSION: ("50000", 8)}
    finally:
        broker.close()
    again = InProcessBroker(tmp_path / "data", BOUNDS)
    try:
        assert describe(again, "g") == {HEARTBEAT: ("5000", 5), SESSION: ("50000", 8)}
        assert again.server.state.groups.coordinator._runtime.consumer_session_timeout_ms("g") == 50_000
        # DescribeConfigs v0 says whether a value is the default.
        request = DescribeConfigsRequest(
            resources=[DescribeConfigsRequest.DescribeConfigsResource(resource_type=GROUP, resource_name="g")]
        )
        defaults = {entry.name: entry.is_default for entry in again.call(request, 0).results[0].configs}
        assert defaults == {HEARTBEAT: True, SESSION: False}
    finally:
        again.close()


def test_alter_configs_replaces_every_group_config(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data", BOUNDS)
    try:
        assert alter(broker, "g", (SESSION, SET, "50000"), (HEARTBEAT, SET, "7000")) == (ErrorCode.NONE, None)
        request = AlterConfigsRequest(
            resources=[
                AlterConfigsRequest.AlterConfigsResource(
                    resource_type=GROUP,
                    resource_name="g",
                    configs=[AlterConfigsRequest.AlterableConfig(name=HEARTBEAT, value="8000")],
                )
            ]
        )
        assert broker.call(request, 1).responses[0].error_code == ErrorCode.NONE
        assert describe(broker, "g") == {HEARTBEAT: ("8000", 8), SESSION: ("45000", 5)}
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ((SESSION, SET, "1000"), ErrorCode.INVALID_CONFIG, "group.consumer.min.session.timeout.ms"),
        ((SESSION, SET, "999999"), ErrorCode.INVALID_CONFIG, "group.consumer.max.session.timeout.ms"),
        ((HEARTBEAT, SET, "often"), ErrorCode.INVALID_CONFIG, "expected int"),
        (("session.timeout.ms", SET, "50000"), ErrorCode.INVALID_CONFIG, "unknown group config"),
        (("share.auto.offset.reset", SET, "earliest"), ErrorCode.INVALID_CONFIG, "no share or streams"),
        ((SESSION, APPEND, "50000"), ErrorCode.INVALID_CONFIG, "not a list"),
        ((SESSION, SET, None), ErrorCode.INVALID_CONFIG, "needs a value"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(
    tmp_path: Path, change: tuple[str, int, str | None], error: int, message: str
) -> None:
    broker = InProcessBroker(tmp_path / "data")
    try:
        code, text = alter(broker, "g", change)
        assert code == error and text is not None and message in text
        assert describe(broker, "g") == {HEARTBEAT: ("5000", 5), SESSION: ("45000", 5)}
        assert not (tmp_path / "data" / GROUP_CONFIGS_FILE_NAME).exists()
    finally:
        broker.close()


def test_an_empty_group_id_is_refused(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data")
    try:
        request = DescribeConfigsRequest(
            resources=[DescribeConfigsRequest.DescribeConfigsResource(resource_type=GROUP, resource_name="")]
        )
        assert broker.call(request, 4).results[0].error_code == ErrorCode.INVALID_REQUEST
        assert alter(broker, "", (SESSION, SET, "50000"))[0] == ErrorCode.INVALID_REQUEST
    finally:
        broker.close()


def test_a_group_config_file_strom_cannot_read_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / GROUP_CONFIGS_FILE_NAME).write_text('{"version": 1, "groups": {"g": 5}}')
    with pytest.raises(GroupConfigFileError, match="not a group config file"):
        FileGroupConfigStore(data).load()
