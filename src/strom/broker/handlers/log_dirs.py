"""DescribeLogDirs 0-4: the one data directory, with every partition's size on disk.

Tools use it to show how much space a topic takes (`strom topics describe`,
kafka-log-dirs). A single broker has one log directory and no future replicas, so offset lag is 0.
"""

from __future__ import annotations

import shutil

from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse

Topic = DescribeLogDirsResponse.DescribeLogDirsTopic
Partition = DescribeLogDirsResponse.DescribeLogDirsPartition


@handles(DescribeLogDirsRequest, DescribeLogDirsResponse, 0, 4)
async def handle_describe_log_dirs(
    context: RequestContext, request: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    state = context.broker
    if state.authorizer is not None and not cluster_allowed(context, AclOperation.DESCRIBE):
        # As Kafka: nothing described (v3+ says why).
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = dict.fromkeys(state.logs.topic_names())
    else:
        wanted = {topic.topic: set(topic.partitions) for topic in request.topics}
    topics: list[Topic] = []
    for name, partitions in sorted(wanted.items()):
        metadata = state.logs.topic(name)
        if metadata is None:
            continue  # Kafka leaves out what this broker does not host
        entries = []
        for index in range(metadata.partitions):
            partition_log = state.logs.log(name, index)
            if partition_log is None or (partitions is not None and index not in partitions):
                continue
            entries.append(
                Partition(
                    partition_index=index,
                    partition_size=partition_log.size_bytes,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        topics.append(Topic(name=name, partitions=entries))
    data_dir = state.config.data_dir.resolve()
    usage = shutil.disk_usage(data_dir)
    result = DescribeLogDirsResponse.DescribeLogDirsResult(
        error_code=ErrorCode.NONE, log_dir=str(data_dir), topics=topics
    )
    if context.api_version >= 4:
        result.total_bytes = usage.total
        result.usable_bytes = usage.free
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=[result])
