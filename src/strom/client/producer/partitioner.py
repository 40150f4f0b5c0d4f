"""Choosing a partition: murmur2 of the key as Java producers do, sticky for keyless records.

Keys land where Java's default partitioner puts them: ``(murmur2(key) & 0x7fffffff) % partitions``
with Kafka's 32-bit murmur2 (seed 0x9747b28c). Keyless records stick to one partition until its
batch is closed or sent (KIP-480), then move to another, so small batches do not spread thin.
"""

from __future__ import annotations

import random

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key"]

_MASK_32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_MULTIPLIER = 0x5BD1E995
_SHIFT = 24


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (what Java's ``Utils.murmur2`` returns)."""
    length = len(data)
    hash_value = (_SEED ^ length) & _MASK_32
    whole_words_end = length - length % 4
    for index in range(0, whole_words_end, 4):
        word = int.from_bytes(data[index : index + 4], "little")
        word = (word * _MULTIPLIER) & _MASK_32
        word ^= word >> _SHIFT
        word = (word * _MULTIPLIER) & _MASK_32
        hash_value = (hash_value * _MULTIPLIER) & _MASK_32
        hash_value ^= word
    tail = length % 4
    if tail:
        # The trailing 1-3 bytes, most significant first, folded in as Java's fall-through switch does.
        if tail == 3:
            hash_value ^= data[whole_words_end + 2] << 16
        if tail >= 2:
            hash_value ^= data[whole_words_end + 1] << 8
        hash_value ^= data[whole_words_end]
        hash_value = (hash_value * _MULTIPLIER) & _MASK_32
    hash_value ^= hash_value >> 13
    hash_value = (hash_value * _MULTIPLIER) & _MASK_32
    hash_value ^= hash_value >> 15
    return hash_value - (1 << 32) if hash_value & 0x80000000 else hash_value


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition Java's default partitioner gives ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


class StickyPartitioner:
    """Per topic, the partition keyless records currently go to."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def current(self, topic: str) -> int | None:
        return self._sticky.get(topic)

    def next_partition(self, topic: str, partition_count: int) -> int:
        """Move ``topic``'s keyless records to another partition (a different one when possible)."""
        previous = self._sticky.get(topic)
        if partition_count == 1:
            chosen = 0
        elif previous is None or previous >= partition_count:
            chosen = self._rng.randrange(partition_count)
        else:
            chosen = (previous + 1 + self._rng.randrange(partition_count - 1)) % partition_count
        self._sticky[topic] = chosen
        return chosen
