"""Kafka's ACL operation codes and the "authorized operations" bit fields built from them.

Metadata (v8+), DescribeCluster, DescribeGroups (v3+) and DescribeTopicPartitions can report
which operations the caller may perform on a topic, the cluster or a group: a 32-bit field with
bit ``1 << code`` set for every allowed ``AclOperation``. Only the operations that apply to the
resource type are ever set (Kafka's supported operations per resource type). A broker without an
authorizer allows every one of them, which is what strom answers until ACLs exist. When the
client did not ask, the field keeps its "not provided" value, ``OPERATIONS_NOT_PROVIDED``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = [
    "CLUSTER_OPERATIONS",
    "CLUSTER_OPERATION_LIST",
    "GROUP_OPERATIONS",
    "GROUP_OPERATION_LIST",
    "OPERATIONS_NOT_PROVIDED",
    "TOPIC_OPERATIONS",
    "TOPIC_OPERATION_LIST",
    "AclOperation",
    "operations_bit_field",
]

# What the specifications give the authorized-operations fields by default: int32 minimum.
OPERATIONS_NOT_PROVIDED = -(2**31)


class AclOperation(enum.IntEnum):
    """The operation codes of Kafka's ACLs (org.apache.kafka.common.acl.AclOperation)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """The int32 with bit ``1 << code`` set for each operation."""
    field = 0
    for operation in operations:
        field |= 1 << operation
    return field


TOPIC_OPERATION_LIST = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)
GROUP_OPERATION_LIST = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE)
CLUSTER_OPERATION_LIST = (
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)

# Every operation that applies to the resource type (the list above), allowed: the answer without an authorizer.
TOPIC_OPERATIONS = operations_bit_field(TOPIC_OPERATION_LIST)
GROUP_OPERATIONS = operations_bit_field(GROUP_OPERATION_LIST)
CLUSTER_OPERATIONS = operations_bit_field(CLUSTER_OPERATION_LIST)
