"""Admin: topics, partitions, configs, records and offsets. Group operations arrive with the
group coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import TracebackType
from typing import Any, Self, TypeVar

from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.config import AdminConfig
from strom.client.errors import KafkaError, error_for_code
from strom.client.offsets import OffsetAndTimestamp, list_offsets, timestamp_spec
from strom.client.transport import LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_configs import AlterConfigsRequest
from strom.protocol.messages.create_partitions import CreatePartitionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.delete_records import DeleteRecordsRequest
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.describe_cluster import DescribeClusterRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest

__all__ = [
    "Admin",
    "AlterConfigOperation",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "NewTopic",
    "PartitionDescription",
    "TopicDescription",
]

T = TypeVar("T")


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class AlterConfigOperation(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    config: dict[str, str] = field(default_factory=dict)
    # Partition -> broker ids, to place replicas by hand (then leave the counts at -1).
    replica_assignment: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigResource:
    resource_type: ConfigResourceType
    name: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    source: int = -1


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    is_internal: bool = False
    topic_id: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerNode]


def _raise_for(code: int, message: str | None, context: str) -> None:
    if code != ErrorCode.NONE:
        raise error_for_code(code, message, context=context)


class Admin:
    """Synchronous admin client. Every method raises a ``KafkaError`` subclass on failure."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        self.config = AdminConfig.from_settings(config, **settings)
        self._loop_thread = LoopThread(f"strom-admin-{self.config.client_id}")
        self._transport: Transport = self._run(self._make_transport())
        self._closed = False

    async def _make_transport(self) -> Transport:
        return Transport(self.config)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        # A little over request.timeout.ms: the loop enforces the real timeouts itself.
        return self._loop_thread.run(coroutine, timeout_s=self.config.request_timeout_ms / 1000 * 2 + 5)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._run(self._transport.close())
        self._loop_thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def _to_controller(self, request: Any) -> Any:
        controller = self._transport.metadata.controller_id
        if controller < 0 or controller not in self._transport.metadata.brokers:
            await self._transport.refresh_metadata([])
            controller = self._transport.metadata.controller_id
        if controller >= 0 and controller in self._transport.metadata.brokers:
            return await self._transport.send(controller, request)
        return await self._transport.send_any(request)

    # -- topics --------------------------------------------------------------------------------

    def create_topics(
        self, topics: Iterable[NewTopic], validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=topic.name,
                    num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    assignments=[
                        CreateTopicsRequest.CreatableReplicaAssignment(
                            partition_index=index, broker_ids=list(brokers)
                        )
                        for index, brokers in sorted(topic.replica_assignment.items())
                    ],
                    configs=[
                        CreateTopicsRequest.CreatableTopicConfig(name=name, value=value)
                        for name, value in topic.config.items()
                    ],
                )
                for topic in topics
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = self._run(self._to_controller(request))
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, f"create topic {result.name!r}")

    def delete_topics(self, names: Iterable[str], timeout_ms: int = 30_000) -> None:
        names = list(names)
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=name) for name in names],
            topic_names=names,
            timeout_ms=timeout_ms,
        )
        response = self._run(self._to_controller(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"delete topic {result.name!r}")

    def create_partitions(
        self, new_totals: Mapping[str, int], validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        """Grow each topic to the given total number of partitions."""
        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=total, assignments=None)
                for name, total in new_totals.items()
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = self._run(self._to_controller(request))
        for result in response.results:
            _raise_for(result.error_code, result.error_message, f"create partitions for {result.name!r}")

    def list_topics(self, include_internal: bool = False) -> list[str]:
        async def fetch() -> list[str]:
            await self._transport.refresh_metadata(None)
            return sorted(
                name
                for name, info in self._transport.metadata.topics.items()
                if include_internal or not info.is_internal
            )

        return self._run(fetch())

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        names = list(names)

        async def fetch() -> dict[str, TopicDescription]:
            await self._transport.refresh_metadata(names)
            descriptions: dict[str, TopicDescription] = {}
            for name in names:
                info = self._transport.metadata.topics.get(name)
                if info is None:
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=f"topic {name!r}")
                _raise_for(info.error_code, None, f"topic {name!r}")
                descriptions[name] = TopicDescription(
                    name,
                    [
                        PartitionDescription(
                            partition.partition, partition.leader, partition.replicas, partition.isr
                        )
                        for _, partition in sorted(info.partitions.items())
                    ],
                    info.is_internal,
                    info.topic_id,
                )
            return descriptions

        return self._run(fetch())

    def describe_cluster(self) -> ClusterDescription:
        async def fetch() -> ClusterDescription:
            transport = self._transport
            if transport.ready_channel(transport.least_loaded_node()) is None:
                await transport.refresh_metadata([])
            node = transport.least_loaded_node()
            channel = await transport.channel(node)
            if channel.connection.supports(DescribeClusterRequest.API_KEY):
                response = await transport.send(node, DescribeClusterRequest())
                _raise_for(response.error_code, response.error_message, "describe cluster")
                return ClusterDescription(
                    response.cluster_id,
                    response.controller_id,
                    [
                        BrokerNode(broker.broker_id, broker.host, broker.port, broker.rack)
                        for broker in response.brokers
                    ],
                )
            await transport.refresh_metadata([])
            metadata = transport.metadata
            return ClusterDescription(
                metadata.cluster_id,
                metadata.controller_id,
                sorted(metadata.brokers.values(), key=lambda b: b.node_id),
            )

        return self._run(fetch())

    # -- configs -------------------------------------------------------------------------------

    def describe_configs(
        self, resources: Iterable[ConfigResource], keys: Iterable[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        resources = list(resources)
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configuration_keys=None if keys is None else list(keys),
                )
                for resource in resources
            ]
        )
        response = self._run(self._transport.send_any(request))
        described: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for result in response.results:
            resource = ConfigResource(ConfigResourceType(result.resource_type), result.resource_name)
            _raise_for(result.error_code, result.error_message, f"describe configs of {resource}")
            described[resource] = {
                entry.name: ConfigEntry(
                    entry.name,
                    entry.value,
                    entry.read_only,
                    entry.is_default,
                    entry.is_sensitive,
                    entry.config_source,
                )
                for entry in result.configs
            }
        return described

    def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str | None]], validate_only: bool = False
    ) -> None:
        """Replace each resource's whole dynamic config (keys not given return to their default)."""
        request = AlterConfigsRequest(
            resources=[
                AlterConfigsRequest.AlterConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configs=[
                        AlterConfigsRequest.AlterableConfig(name=name, value=value)
                        for name, value in entries.items()
                    ],
                )
                for resource, entries in configs.items()
            ],
            validate_only=validate_only,
        )
        response = self._run(self._transport.send_any(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"alter configs of {result.resource_name!r}")

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[tuple[str, AlterConfigOperation, str | None]]],
        validate_only: bool = False,
    ) -> None:
        """Apply (name, operation, value) changes, leaving other keys alone."""
        from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest

        request = IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configs=[
                        IncrementalAlterConfigsRequest.AlterableConfig(
                            name=name, config_operation=int(operation), value=value
                        )
                        for name, operation, value in entries
                    ],
                )
                for resource, entries in changes.items()
            ],
            validate_only=validate_only,
        )
        response = self._run(self._transport.send_any(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"alter configs of {result.resource_name!r}")

    # -- records and offsets -------------------------------------------------------------------

    def delete_records(
        self, before: Mapping[TopicPartition, int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int]:
        """Delete records below each offset (-1: the high watermark); returns the new low watermarks."""
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}

        async def attempt() -> dict[TopicPartition, int]:
            transport = self._transport
            await transport.refresh_metadata(sorted({tp.topic for tp in wanted}))
            by_leader: dict[int, list[TopicPartition]] = {}
            for topic_partition in wanted:
                leader = transport.metadata.leader_for(topic_partition)
                if leader is None:
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=str(topic_partition))
                by_leader.setdefault(leader, []).append(topic_partition)

            async def ask(leader: int, topic_partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
                topics: dict[str, DeleteRecordsRequest.DeleteRecordsTopic] = {}
                for tp in topic_partitions:
                    topics.setdefault(
                        tp.topic, DeleteRecordsRequest.DeleteRecordsTopic(name=tp.topic)
                    ).partitions.append(
                        DeleteRecordsRequest.DeleteRecordsPartition(
                            partition_index=tp.partition, offset=wanted[tp]
                        )
                    )
                response = await transport.send(
                    leader, DeleteRecordsRequest(topics=list(topics.values()), timeout_ms=timeout_ms)
                )
                low_watermarks: dict[TopicPartition, int] = {}
                for topic in response.topics:
                    for partition in topic.partitions:
                        tp = TopicPartition(topic.name, partition.partition_index)
                        _raise_for(partition.error_code, None, f"delete records of {tp}")
                        low_watermarks[tp] = partition.low_watermark
                return low_watermarks

            results: dict[TopicPartition, int] = {}
            for answer in await asyncio.gather(*(ask(leader, tps) for leader, tps in by_leader.items())):
                results.update(answer)
            return results

        return self._run(self._transport.with_retries(attempt))

    def list_offsets(
        self, specs: Mapping[TopicPartition, str | int], isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition: ``"earliest"``, ``"latest"`` or a timestamp in ms -> the offset
        (None when no record is at or after the timestamp)."""
        converted = {TopicPartition(*tp): timestamp_spec(spec) for tp, spec in specs.items()}
        level = {"read_uncommitted": 0, "read_committed": 1}.get(isolation_level)
        if level is None:
            raise KafkaError(
                f"isolation level must be read_uncommitted or read_committed, not {isolation_level!r}"
            )
        return self._run(list_offsets(self._transport, converted, isolation_level=level))
