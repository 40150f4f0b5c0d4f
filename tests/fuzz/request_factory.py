"""Seeded random requests that decode: the raw material of the handler and broker fuzz tests.

``RequestFactory.build(request_type, version)`` walks the generated class's ``FIELDS`` and fills
every field the version has. Two kinds of request come out:

- *wild* ones: every value is what a hostile or buggy client could send — names of topics and
  groups that exist and names that do not, the extremes of every integer type, None where the field
  is nullable, empty and short arrays, real record batches and garbage in records fields;
- *sensible* ones: what a well-behaved client sends (existing topics, a new member with generation
  -1, small timeouts, valid batches and consumer-protocol metadata) except for a leaf now and then
  that gets a wild value. They get past a handler's first checks, so the wild value lands deep.

Everything comes from one ``random.Random``, so a seed replays the same requests.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

from strom.assignors.protocol import Assignment, Subscription, encode_assignment, encode_subscription
from strom.broker.config import BROKER_CONFIG_KEYS
from strom.coordinator.group_configs import GROUP_CONFIG_KEYS
from strom.protocol.headers import encode_request
from strom.protocol.primitives import FieldSpec
from strom.protocol.records import Record, build_batch
from strom.protocol.records.compression import CompressionType
from strom.storage import TOPIC_CONFIG_KEYS

INTEGER_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
ARRAY_LENGTH_MAX = 3
# Field names (snake case) whose values should mostly be small: indexes, counts, epochs.
SMALL_NUMBER_HINTS = ("partition", "index", "epoch", "generation", "count", "replication", "version")
# Fields a broker waits on; kept short in the requests we build (mutations still reach the extremes).
WAIT_HINTS = ("timeout", "wait")
WAIT_MS_MAX = 50
# Strings a client may send anywhere: empty, invalid as a name, non-ASCII, too long for a topic.
ODD_STRINGS = ["", "x", "bad name!", "é" * 3, "a" * 300, "0", "__consumer_offsets"]
NAME_POOL_SIZE = 16
# Config names and values, so AlterConfigs and friends get past "unknown key". Keys that make a
# log roll a segment per append (segment size and age) are left out: thousands of segments, each
# with open files, is the file-descriptor budget of issue 11 item 3, measured on its own.
SEGMENT_ROLLING_KEYS = frozenset(
    {"segment.bytes", "segment.ms", "log.segment.bytes", "log.roll.ms", "log.roll.hours"}
)
CONFIG_KEYS = sorted({*BROKER_CONFIG_KEYS, *TOPIC_CONFIG_KEYS, *GROUP_CONFIG_KEYS} - SEGMENT_ROLLING_KEYS)
CONFIG_VALUES = [
    "0",
    "1",
    "-1",
    "-2",
    "100000000",
    "9223372036854775807",
    "99999999999999999999",
    "compact",
    "delete",
    "compact,delete",
    "LogAppendTime",
    "true",
    "",
    "abc",
]


def _in(version_range: tuple[int, int], version: int) -> bool:
    return version_range[0] <= version <= version_range[1]


SENSIBLE_FRACTION = 0.6
# In a sensible request, the chance that one leaf value is wild anyway.
WILD_LEAF_CHANCE = 0.08


class RequestFactory:
    def __init__(
        self,
        rng: random.Random,
        topics: Sequence[str] = (),
        topic_ids: Sequence[uuid.UUID] = (),
        groups: Sequence[str] = (),
    ) -> None:
        self.rng = rng
        self.topics = list(topics) or ["fuzz-topic"]
        self.topic_ids = list(topic_ids)
        self.groups = list(groups) or ["fuzz-group"]
        self._batches = [self._make_batch(codec) for codec in CompressionType]
        self.sensible = False
        subscribed = Subscription(topics=self.topics[:2], owned_partitions=[(self.topics[0], 0)])
        self._subscriptions = [encode_subscription(subscribed, version) for version in range(4)]
        self._assignments = [encode_assignment(Assignment(partitions=[(self.topics[0], 0)]))]
        # A fixed pool, so the topics and groups requests may create stay few however many are sent.
        self.other_names = [
            "".join(rng.choice("abcxyz-._0") for _ in range(rng.randint(1, 12)))
            for _ in range(NAME_POOL_SIZE)
        ]

    def _make_batch(self, codec: int) -> bytes:
        records = [Record(i, i, b"key-%d" % i, b"value-%d" % i, [("h", b"v")]) for i in range(3)]
        return build_batch(records, base_timestamp=1_700_000_000_000, compression=codec)

    # -- leaves ----------------------------------------------------------------------------------

    def _wild(self) -> bool:
        return not self.sensible or self.rng.random() < WILD_LEAF_CHANCE

    def sensible_integer(self, type_name: str, field: str) -> int:
        low, high = INTEGER_RANGES[type_name]
        if field == "session_timeout_ms":
            return self.rng.randint(6_000, 10_000)  # within the broker's default bounds
        if field == "rebalance_timeout_ms":
            return self.rng.randint(50, 500)
        if any(hint in field for hint in WAIT_HINTS):
            return self.rng.randint(0, WAIT_MS_MAX)
        if "generation" in field or "epoch" in field or field.endswith("producer_id"):
            return -1
        if field in ("num_partitions", "count"):
            return self.rng.randint(1, 3)
        if field == "replication_factor":
            return self.rng.choice([1, -1])
        if field == "acks":
            return self.rng.choice([-1, 0, 1])
        if field == "resource_type":
            return self.rng.choice([2, 4, 32])
        if field == "config_operation":
            return self.rng.randint(0, 3)
        if "bytes" in field:
            return self.rng.choice([1 << 16, 1 << 20])
        if "partition" in field or "index" in field:
            return self.rng.randint(0, 1)
        return self.rng.randint(max(low, 0), min(high, 10))

    def integer(self, type_name: str, field: str) -> int:
        if not self._wild():
            return self.sensible_integer(type_name, field)
        low, high = INTEGER_RANGES[type_name]
        roll = self.rng.random()
        if field == "resource_type" and roll < 0.8:
            return self.rng.choice([2, 4, 32])  # TOPIC, BROKER, GROUP
        if field == "config_operation" and roll < 0.8:
            return self.rng.randint(0, 3)
        if any(hint in field for hint in WAIT_HINTS) and roll < 0.9:
            return self.rng.randint(0, WAIT_MS_MAX)
        if any(hint in field for hint in SMALL_NUMBER_HINTS) and roll < 0.7:
            return self.rng.randint(max(low, -1), min(high, 4))
        if roll < 0.5:
            return self.rng.choice([low, high, 0, -1 if low < 0 else 1, 1])
        return self.rng.randint(low, high)

    def sensible_string(self, field: str) -> str:
        if field.endswith("member_id") or field.endswith("instance_id"):
            return ""
        if field == "resource_name":
            return self.rng.choice(["", "0", *self.topics, *self.groups])
        if field == "value":
            return self.rng.choice(CONFIG_VALUES)
        if field == "protocol_type":
            return "consumer"
        if "group" in field or field == "key":
            return self.rng.choice(self.groups)
        if "topic" in field or field == "name":
            return self.rng.choice([*self.topics, *CONFIG_KEYS[:4]])
        return self.rng.choice(["fuzz", "range", "x"])

    def string(self, field: str) -> str:
        if not self._wild():
            return self.sensible_string(field)
        roll = self.rng.random()
        if field.endswith("member_id") and roll < 0.5:
            return ""  # a member not (yet) in a group: the path simple commits and first joins take
        if field == "resource_name" and roll < 0.7:
            return self.rng.choice(["", "0", "1", *self.topics])
        if field == "value" and roll < 0.8:
            return self.rng.choice(CONFIG_VALUES)
        if field == "name" and roll < 0.3:
            return self.rng.choice(CONFIG_KEYS)
        if "topic" in field or field == "name":
            if roll < 0.6:
                return self.rng.choice(self.topics)
        elif ("group" in field or field == "key") and roll < 0.6:
            return self.rng.choice(self.groups)
        if roll < 0.8:
            return self.rng.choice(ODD_STRINGS)
        return self.rng.choice(self.other_names)

    def bytes_(self, field: str) -> bytes:
        if not self._wild():
            if "metadata" in field:
                return self.rng.choice(self._subscriptions)
            if "assignment" in field:
                return self.rng.choice(self._assignments)
            return b""
        return self.rng.randbytes(self.rng.randint(0, 16))

    def records(self) -> bytes:
        if not self._wild():
            return self.rng.choice(self._batches)
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.choice(self._batches)
        if roll < 0.8:
            batch = bytearray(self.rng.choice(self._batches))
            batch[self.rng.randrange(len(batch))] = self.rng.randrange(256)
            return bytes(batch)
        return self.rng.randbytes(self.rng.randint(0, 80))

    def uuid(self) -> uuid.UUID:
        if not self._wild() and self.topic_ids:
            return self.rng.choice(self.topic_ids)
        roll = self.rng.random()
        if self.topic_ids and roll < 0.5:
            return self.rng.choice(self.topic_ids)
        if roll < 0.75:
            return uuid.UUID(int=0)
        return uuid.UUID(int=self.rng.getrandbits(128))

    # -- structure -------------------------------------------------------------------------------

    def value(self, top: type[Any], type_name: str, field: str, version: int) -> Any:
        if type_name.startswith("[]"):
            element = type_name[2:]
            return [
                self.value(top, element, field, version) for _ in range(self.rng.randint(0, ARRAY_LENGTH_MAX))
            ]
        if type_name in INTEGER_RANGES:
            return self.integer(type_name, field)
        if type_name == "bool":
            return self.rng.random() < 0.5
        if type_name == "float64":
            return self.rng.choice([0.0, 1.5, -1.0, 1e308])
        if type_name == "string":
            return self.string(field)
        if type_name == "bytes":
            return self.bytes_(field)
        if type_name == "records":
            return self.records()
        if type_name == "uuid":
            return self.uuid()
        return self.instance(top, getattr(top, type_name), version)

    def instance(self, top: type[Any], cls: type[Any], version: int) -> Any:
        values: dict[str, Any] = {}
        spec: FieldSpec
        for spec in cls.FIELDS:
            if not _in(spec.versions, version):
                continue
            null_chance = 0.5 if spec.name == "cursor" else 0.15
            if not self._wild():
                null_chance = 1.0 if spec.name in ("group_instance_id", "cursor") else 0.0
            if _in(spec.nullable_versions, version) and self.rng.random() < null_chance:
                values[spec.name] = None
            else:
                values[spec.name] = self.value(top, spec.type, spec.name, version)
        return cls(**values)

    def build(self, request_type: type[Any], version: int) -> Any:
        self.sensible = self.rng.random() < SENSIBLE_FRACTION
        return self.instance(request_type, request_type, version)

    def frame(self, request_type: type[Any], version: int, correlation_id: int) -> bytes:
        """A whole request frame (size prefix, header, body) of a random valid request."""
        body = self.build(request_type, version).encode(version)
        client_id = self.rng.choice(["fuzz", None, "", "é"])
        return encode_request(request_type.API_KEY, version, correlation_id, client_id, body)
