"""DescribeLogDirs 0-4: the one data directory, with every partition's size on disk; and
AlterReplicaLogDirs 1-2: moving a replica to a log directory, which with one directory per broker
is moving it to where it is.

Tools use DescribeLogDirs to show how much space a topic takes (`strom topics describe`,
kafka-log-dirs). A broker has one log directory and no future replicas, so offset lag is 0. A
move asked to that directory is done already (NONE) for each replica this broker has
(REPLICA_NOT_AVAILABLE for one it has not); any other directory is LOG_DIR_NOT_FOUND.
"""

from __future__ import annotations

import os
import shutil

from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
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


@handles(AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, 1, 2)
async def handle_alter_replica_log_dirs(
    context: RequestContext, request: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    """With authorization on: ALTER on the cluster, else every partition is refused."""
    state = context.broker
    refused = state.authorizer is not None and not cluster_allowed(context, AclOperation.ALTER)
    # The names of the one directory; the paths asked are compared as text (normalised), never
    # looked up on disk: a client's path may be anything (a NUL byte, ten thousand "../").
    data_dir = {
        os.path.normpath(os.path.abspath(state.config.data_dir)),
        os.path.realpath(state.config.data_dir),
    }
    results: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
    for log_dir in request.dirs:
        here = os.path.normpath(log_dir.path) in data_dir
        for topic in log_dir.topics:
            for index in topic.partitions:
                if refused:
                    error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif not here:
                    error = ErrorCode.LOG_DIR_NOT_FOUND
                elif state.logs.log(topic.name, index) is None:
                    error = ErrorCode.REPLICA_NOT_AVAILABLE
                else:
                    error = ErrorCode.NONE  # it is in that directory already
                results.setdefault(topic.name, []).append(
                    AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(
                        partition_index=index, error_code=error
                    )
                )
    return AlterReplicaLogDirsResponse(
        results=[
            AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(topic_name=name, partitions=partitions)
            for name, partitions in results.items()
        ]
    )
