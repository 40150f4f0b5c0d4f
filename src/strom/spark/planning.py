"""Driver-side look-ups the source plans with: which partitions a query reads and where each one's
offsets stand. A thin layer over the public client API (Admin for topics, Consumer for offsets)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from strom.client.admin import Admin
from strom.client.config import AdminConfig, ConsumerConfig
from strom.client.consumer import Consumer
from strom.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    ReadOptions,
    SourceOptionsError,
    TopicPartitionKey,
)

__all__ = ["OffsetPlanner", "OffsetsOutOfRangeError", "UnknownTopicError", "admin_config", "consumer_config"]

log = logging.getLogger(__name__)


def _known_keys(config_class: type) -> set[str]:
    return {config_field.name.replace("_", ".") for config_field in dataclasses.fields(config_class)}


def admin_config(client_config: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options an Admin client takes (consumer-only keys are left out, not refused)."""
    known = _known_keys(AdminConfig)
    return {key: value for key, value in client_config.items() if key in known}


def consumer_config(client_config: Mapping[str, str], **defaults: str) -> dict[str, str]:
    """Consumer settings: ``defaults`` first, then the user's ``kafka.*`` options (which win).
    ``group.id`` is dropped: the source assigns partitions itself and never joins a group."""
    known = _known_keys(ConsumerConfig)
    config = dict(defaults)
    config.update({key: value for key, value in client_config.items() if key in known and key != "group.id"})
    return config


class UnknownTopicError(SourceOptionsError):
    """``subscribe`` or ``assign`` names a topic or partition the cluster does not have."""


class OffsetsOutOfRangeError(SourceOptionsError):
    """Offsets given to a query lie past the end of a partition, or a start lies after its end."""


def _names(partitions: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in partitions)


class OffsetPlanner:
    """Opens its clients on first use; ``close()`` releases them. Not thread-safe (driver only)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._admin: Admin | None = None
        self._consumer: Consumer | None = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(admin_config(self.options.client_config))
        return self._admin

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.options.client_config))
        return self._consumer

    def close(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                client.close()
        self._consumer = None
        self._admin = None

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions read now: listed by ``assign``, or every partition of the subscribed
        topics (a pattern is matched against the topics that exist at this moment)."""
        options = self.options
        if options.assign:
            return sorted(set(options.assign))
        if options.subscribe:
            names = list(options.subscribe)
        else:
            names = [topic for topic in self.admin.list_topics() if options.matches(topic)]
        if not names:
            return []
        existing = set(self.admin.list_topics())
        described = self.admin.describe_topics([name for name in names if name in existing])
        return sorted(
            (name, partition.partition)
            for name, description in described.items()
            for partition in description.partitions
        )

    def check_exists(self) -> None:
        """Refuse topics named by ``subscribe`` and partitions named by ``assign`` that do not exist:
        they would read nothing, silently (a pattern may match nothing: topics come and go)."""
        options = self.options
        named = list(options.subscribe) or sorted({topic for topic, _ in options.assign})
        if not named:
            return
        where = self.options.client_config.get("bootstrap.servers", "the cluster")
        existing = set(self.admin.list_topics())
        missing = [topic for topic in named if topic not in existing]
        if missing:
            option = "subscribe" if options.subscribe else "assign"
            raise UnknownTopicError(
                f"format('strom'): {'topic' if len(missing) == 1 else 'topics'} {', '.join(missing)} "
                f"named by option {option} {'does' if len(missing) == 1 else 'do'} not exist at {where}"
                " (create it first, or check the name: `strom topics list` shows the topics there are)"
            )
        if options.assign:
            described = self.admin.describe_topics(named)
            counts = {name: len(description.partitions) for name, description in described.items()}
            absent = sorted(tp for tp in set(options.assign) if not 0 <= tp[1] < counts.get(tp[0], 0))
            if absent:
                sizes = ", ".join(
                    f"{topic} has {counts.get(topic, 0)}" for topic in sorted({t for t, _ in absent})
                )
                raise UnknownTopicError(
                    f"format('strom'): option assign names partitions that do not exist: {_names(absent)} ({sizes})"
                )

    def check_range(
        self,
        start: Mapping[TopicPartitionKey, int],
        end: Mapping[TopicPartitionKey, int] | None,
    ) -> None:
        """Refuse start offsets past a partition's latest offset (or after the batch's end) and
        ending offsets past the latest: a range that can never be read, which would give no rows
        (or wait for records that do not exist). As Spark's Kafka source does."""
        latest = self.latest(list(start))
        past_end = sorted(tp for tp, offset in start.items() if offset > latest[tp])
        if past_end:
            raise OffsetsOutOfRangeError(
                "format('strom'): starting offsets past the end of their partitions: "
                + ", ".join(
                    f"{t}-{p} starts at {start[(t, p)]} but its latest offset is {latest[(t, p)]}"
                    for t, p in past_end
                )
                + " (use startingOffsets latest, or offsets up to the latest; `strom topics describe` shows them)"
            )
        if end is None:
            return
        end_past = sorted(tp for tp, offset in end.items() if offset > latest.get(tp, offset))
        if end_past:
            raise OffsetsOutOfRangeError(
                "format('strom'): ending offsets past the end of their partitions: "
                + ", ".join(
                    f"{t}-{p} ends at {end[(t, p)]} but its latest offset is {latest[(t, p)]}"
                    for t, p in end_past
                )
                + " (use endingOffsets latest, or -1 for a partition)"
            )
        reversed_ranges = sorted(tp for tp, offset in start.items() if tp in end and offset > end[tp])
        if reversed_ranges:
            raise OffsetsOutOfRangeError(
                "format('strom'): starting offsets after the ending offsets: "
                + ", ".join(
                    f"{t}-{p} starts at {start[(t, p)]} and ends at {end[(t, p)]}" for t, p in reversed_ranges
                )
            )

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        wanted = list(partitions)
        if not wanted:
            return {}
        return {(tp[0], tp[1]): offset for tp, offset in self.consumer.beginning_offsets(wanted).items()}

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        wanted = list(partitions)
        if not wanted:
            return {}
        return {(tp[0], tp[1]): offset for tp, offset in self.consumer.end_offsets(wanted).items()}

    def resolve(
        self, spec: OffsetSpec, partitions: list[TopicPartitionKey], *, ending: bool
    ) -> dict[TopicPartitionKey, int]:
        """Concrete offsets for ``spec`` on ``partitions``. A timestamp with no record at or after
        it resolves to the latest offset (nothing to read yet), as Kafka's ListOffsets answers."""
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "offsets":
            missing = [tp for tp in partitions if tp not in spec.offsets]
            if missing and ending:
                # A batch end given for some partitions only: the rest read to their latest.
                log.info("no ending offset given for %s; reading to latest", missing)
            elif missing:
                raise SourceOptionsError(
                    f"startingOffsets names no offset for {', '.join(f'{t}-{p}' for t, p in missing)}"
                )
            earliest = self.earliest([tp for tp in partitions if spec.offsets.get(tp) == EARLIEST])
            latest = self.latest([tp for tp in partitions if spec.offsets.get(tp, LATEST) == LATEST])
            resolved: dict[TopicPartitionKey, int] = {}
            for tp in partitions:
                offset = spec.offsets.get(tp, LATEST)
                resolved[tp] = (
                    earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
                )
            return resolved
        if spec.kind in ("timestamp", "timestamps"):
            if spec.kind == "timestamp":
                timestamps = {tp: spec.timestamp_ms for tp in partitions}
            else:
                missing = [tp for tp in partitions if tp not in spec.offsets]
                if missing:
                    raise SourceOptionsError(
                        f"no timestamp given for {', '.join(f'{t}-{p}' for t, p in missing)}"
                    )
                timestamps = {tp: spec.offsets[tp] for tp in partitions}
            found = self.consumer.offsets_for_times(timestamps)
            latest = self.latest(partitions)
            answers = {(tp[0], tp[1]): answer for tp, answer in found.items()}
            return {
                tp: answer.offset if (answer := answers.get(tp)) is not None else latest[tp]
                for tp in partitions
            }
        raise AssertionError(f"unknown offset spec kind {spec.kind!r}")
