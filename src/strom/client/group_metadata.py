"""What a transactional producer needs to know of a consumer's group membership (KIP-447), and a
committed offset with its metadata (the Admin reads them, a transactional producer commits them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsumerGroupMetadata", "OffsetAndMetadata"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership: ``Consumer.consumer_group_metadata()`` gives it to
    ``Producer.send_offsets_to_transaction()``, whose TxnOffsetCommit carries the generation and
    member id. The group's coordinator refuses offsets of a member that is no
    longer in the generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), so a
    consumer that lost its partitions cannot commit them through a zombie transaction.

    ``generation_id`` -1 and ``member_id`` "" mean "no membership": the coordinator then accepts
    the offsets from anyone (what a bare group id gives)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A group's committed offset (the next record to read) and the free-form text committed with it
    (None or "" when there is none; the broker bounds it by ``offset.metadata.max.bytes``)."""

    offset: int
    metadata: str | None = None
