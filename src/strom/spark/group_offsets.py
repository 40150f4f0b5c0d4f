"""Committing a pipeline's progress to a consumer group, so ``strom groups describe`` shows its lag.

The pipeline never joins the group (it assigns partitions itself); the Admin client's
``alter_group_offsets`` commits from outside with generation -1 and an empty member id, which the
broker accepts for a group that has no members.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.spark.options import TopicPartitionKey
from strom.spark.planning import admin_config

__all__ = ["commit_group_offsets"]


def commit_group_offsets(
    client_config: Mapping[str, str], group_id: str, offsets: Mapping[TopicPartitionKey, int]
) -> None:
    """Store ``offsets`` (the next offset to read, per partition) as ``group_id``'s committed offsets."""
    if not offsets:
        return
    with Admin(admin_config(client_config)) as admin:
        admin.alter_group_offsets(group_id, {TopicPartition(*tp): offset for tp, offset in offsets.items()})
