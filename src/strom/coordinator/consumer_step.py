"""The consumer group's step (KIP-848): from the members' changes to the records that move the
group on — subscribed topics resolved (names, and regexes matched against the cluster's topics),
the group epoch bumped when the subscriptions or the topics changed, a new target assignment from
the server assignor when the group epoch is past the target's, and one member's reconciliation step.

Pure functions of the group's applied state: nothing here writes, arms a timer or answers anyone
(``consumer_membership.py`` and ``consumer_classic.py`` do, once the records are written).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.assignors.server import GroupSpec, MemberSpec, ServerAssignor, TopicSpec
from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    MemberAssignment,
    MemberMetadata,
    normalized,
)
from strom.coordinator.consumer_records import (
    current_record,
    epoch_record,
    member_record,
    member_tombstones,
    subscription_metadata_record,
    target_epoch_record,
    target_record,
)
from strom.coordinator.consumer_topics import INTERNAL_TOPICS, TopicsView
from strom.coordinator.reconciliation import reconcile
from strom.coordinator.records import Record, group_key_bytes


@functools.lru_cache(maxsize=1024)
def compile_subscription_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern (raises re.error for a bad one)."""
    return re.compile(pattern)


@dataclass
class _Plan:
    """What an operation writes, and the group as its records will leave it."""

    records: list[Record]
    members: dict[str, MemberMetadata]
    subscription_metadata: dict[str, TopicSpec]
    group_epoch: int
    target_epoch: int
    targets: Mapping[str, Assignment]


@dataclass
class Plan:
    """What an operation writes, and the group as its records will leave it."""

    records: list[Record]
    members: dict[str, MemberMetadata]
    subscription_metadata: dict[str, TopicSpec]
    group_epoch: int
    target_epoch: int
    targets: Mapping[str, Assignment]


class GroupStep:
    def __init__(
        self, config: CoordinatorConfig, topics: TopicsView, assignors: Mapping[str, ServerAssignor]
    ) -> None:
        self.config = config
        self.topics = topics
        self.assignors = assignors

    def member_step(
        self,
        consumer: ConsumerGroup,
        metadata: MemberMetadata,
        current_before: MemberAssignment,
        owned: Assignment | None,
        replaced: str | None = None,
    ) -> tuple[list[Record], MemberAssignment]:
        """A member joins or heartbeats with ``metadata`` (taking the place of ``replaced``, a static
        member's previous instance, if given): the records that record it, move the group on, and
        take its reconciliation step from ``current_before``; and its current assignment after."""
        group_id = consumer.group_id
        member_id = metadata.member_id
        old = consumer.members.get(member_id)
        if (
            replaced is None
            and old == metadata
            and consumer.exists
            and not consumer.metadata_stale
            and consumer.group_epoch == consumer.target_epoch
        ):
            # The common heartbeat: nothing about the member or the group changed.
            targets: Mapping[str, Assignment] = consumer.targets
            target_epoch = consumer.target_epoch
            records: list[Record] = []
        else:
            members = dict(consumer.members)
            targets_before: dict[str, Assignment] = dict(consumer.targets)
            records = []
            if replaced is not None:
                # The static member's new instance takes the place of the one that left for a
                # while: its target and its partitions, with no rebalance unless its subscription
                # changed.
                records.extend(member_tombstones(group_id, replaced))
                del members[replaced]
                targets_before[member_id] = targets_before.pop(replaced, {})
                bump = metadata.subscription_differs(consumer.members[replaced])
            else:
                bump = old is None or old.subscription_differs(metadata)
            if old != metadata:
                records.append(member_record(group_id, member_id, metadata))
            members[member_id] = metadata
            plan = self.plan(consumer, members, records, bump, targets_before)
            records = plan.records
            targets = plan.targets
            target_epoch = plan.target_epoch
            if (
                replaced is not None
                and member_id not in consumer.targets
                and target_epoch == consumer.target_epoch
            ):
                records.append(target_record(group_id, member_id, targets_before[member_id]))
                targets = {**targets, member_id: targets_before[member_id]}

        def owned_by_another(partition: tuple[uuid.UUID, int]) -> bool:
            owner = consumer.owner_of(partition)
            return owner is not None and owner != member_id and owner != replaced

        current_after = reconcile(
            current_before, target_epoch, targets.get(member_id, {}), owned, owned_by_another
        )
        if current_after != consumer.current.get(member_id):
            records.append(current_record(group_id, member_id, current_after))
        return records, current_after

    def removal_plan(self, consumer: ConsumerGroup, member_ids: Iterable[str]) -> Plan:
        """Members leave (or are fenced): their records deleted, a new epoch and target."""
        records: list[Record] = []
        members = dict(consumer.members)
        for member_id in member_ids:
            records.extend(member_tombstones(consumer.group_id, member_id))
            members.pop(member_id, None)
        targets_before = {mid: target for mid, target in consumer.targets.items() if mid in members}
        return self.plan(consumer, members, records, True, targets_before)

    def plan(
        self,
        consumer: ConsumerGroup,
        members: dict[str, MemberMetadata],
        records: list[Record],
        bump: bool,
        targets_before: Mapping[str, Assignment] | None = None,
        *,
        refresh_metadata: bool = False,
    ) -> Plan:
        """The records after ``records`` (members' own) that move the group on: the subscribed
        topics' metadata, the group epoch (bumped if ``bump`` or the metadata changed) and, when
        the epoch is past the target's, a new target computed from ``targets_before``."""
        group_id = consumer.group_id
        records = list(records)
        if not consumer.exists:
            bump = True
            if consumer.replaces_classic:
                records.insert(0, (group_key_bytes(group_id), None))
        subscription_metadata = consumer.subscription_metadata
        if bump or refresh_metadata or consumer.metadata_stale:
            resolved = self.resolve_subscription_metadata(consumer, members.values())
            consumer.metadata_stale = False
            if resolved != subscription_metadata:
                records.append(subscription_metadata_record(group_id, resolved))
                subscription_metadata = resolved
                bump = True
        group_epoch = consumer.group_epoch + 1 if bump else consumer.group_epoch
        if bump:
            records.append(epoch_record(group_id, group_epoch))
        targets: Mapping[str, Assignment] = consumer.targets
        target_epoch = consumer.target_epoch
        if group_epoch > target_epoch:
            before = consumer.targets if targets_before is None else targets_before
            new_targets = self.assign(consumer, members, subscription_metadata, before)
            for member_id in sorted(members):
                if new_targets[member_id] != consumer.targets.get(member_id):
                    records.append(target_record(group_id, member_id, new_targets[member_id]))
            records.append(target_epoch_record(group_id, group_epoch))
            targets = new_targets
            target_epoch = group_epoch
        return Plan(records, members, subscription_metadata, group_epoch, target_epoch, targets)

    def member_topics(self, consumer: ConsumerGroup, member: MemberMetadata) -> set[str]:
        names = set(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex is not None:
            matches = consumer.regex_matches.get(regex)
            if matches is None:
                pattern = compile_subscription_regex(regex)
                matches = frozenset(
                    name
                    for name in self.topics.topic_names()
                    if name not in INTERNAL_TOPICS and pattern.fullmatch(name)
                )
                consumer.regex_matches[regex] = matches
            names.update(matches)
        return names

    def resolve_subscription_metadata(
        self, consumer: ConsumerGroup, members: Iterable[MemberMetadata]
    ) -> dict[str, TopicSpec]:
        names: set[str] = set()
        for member in members:
            names |= self.member_topics(consumer, member)
        resolved: dict[str, TopicSpec] = {}
        for name in sorted(names):
            spec = self.topics.topic(name)
            if spec is not None and spec.partition_count > 0:
                resolved[name] = spec
        return resolved

    def preferred_assignor(self, members: Iterable[MemberMetadata]) -> str:
        """The assignor most members ask for (ties: the broker's order), else the broker's first."""
        configured = self.config.consumer_group_assignors
        votes = Counter(member.server_assignor for member in members if member.server_assignor)
        if not votes:
            return configured[0]
        best = max(votes.values())
        for name in configured:
            if votes.get(name) == best:
                return name
        return configured[0]

    def assign(
        self,
        consumer: ConsumerGroup,
        members: Mapping[str, MemberMetadata],
        subscription_metadata: Mapping[str, TopicSpec],
        targets_before: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        if not members:
            return {}
        assignor = self.assignors[self.preferred_assignor(members.values())]
        specs = {
            member_id: MemberSpec(
                member_id=member_id,
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                subscribed_topic_ids=frozenset(
                    subscription_metadata[name].topic_id
                    for name in self.member_topics(consumer, member)
                    if name in subscription_metadata
                ),
                assigned=targets_before.get(member_id, {}),
            )
            for member_id, member in members.items()
        }
        topics = {spec.topic_id: spec for spec in subscription_metadata.values()}
        result = assignor.assign(GroupSpec(members=specs, topics=topics))
        assert set(result) >= set(members), (
            f"assignor {assignor.name} left out members {sorted(set(members) - set(result))}"
        )
        return {member_id: normalized(result[member_id]) for member_id in members}
