"""The consumer group coordinator: group membership, rebalances and committed offsets, pure Python."""

from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState, MemberState
from strom.coordinator.consumer_topics import TopicsView
from strom.coordinator.coordinator import GroupCoordinator
from strom.coordinator.group import Group, Member
from strom.coordinator.partitioning import OFFSETS_TOPIC, java_string_hashcode, partition_for_group
from strom.coordinator.records import CoordinatorLogWriter
from strom.coordinator.state import ALLOWED_PREVIOUS, GroupState, IllegalStateTransition
from strom.coordinator.timers import (
    ManualTimer,
    Timer,
    consumer_rebalance_key,
    consumer_session_key,
    initial_delay_key,
    join_key,
    offsets_expiry_key,
    pending_member_key,
    session_timeout_key,
    sync_timeout_key,
)

__all__ = [
    "ALLOWED_PREVIOUS",
    "OFFSETS_TOPIC",
    "ConsumerGroup",
    "ConsumerGroupState",
    "CoordinatorConfig",
    "CoordinatorLogWriter",
    "Group",
    "GroupCoordinator",
    "GroupState",
    "IllegalStateTransition",
    "ManualTimer",
    "Member",
    "MemberState",
    "Timer",
    "TopicsView",
    "consumer_rebalance_key",
    "consumer_session_key",
    "initial_delay_key",
    "java_string_hashcode",
    "join_key",
    "offsets_expiry_key",
    "partition_for_group",
    "pending_member_key",
    "session_timeout_key",
    "sync_timeout_key",
]
