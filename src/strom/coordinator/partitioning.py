"""Which partition of ``__consumer_offsets`` (and so which broker) coordinates a group."""

from __future__ import annotations

import functools

OFFSETS_TOPIC = "__consumer_offsets"

_INT32_MIN = -(2**31)


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, int32 wrap."""
    encoded = text.encode("utf-16-be", errors="surrogatepass")
    hash_value = 0
    for index in range(0, len(encoded), 2):
        code_unit = (encoded[index] << 8) | encoded[index + 1]
        hash_value = (31 * hash_value + code_unit) & 0xFFFFFFFF
    return hash_value - 2**32 if hash_value >= 2**31 else hash_value


# Every group request asks which partition owns its group, and the hash is a pure-Python loop.
@functools.lru_cache(maxsize=65536)
def partition_for_group(group_id: str, partitions: int) -> int:
    """``abs(hashCode) % partitions`` with Kafka's ``Utils.abs``: Integer.MIN_VALUE maps to 0."""
    assert partitions > 0, f"offsets topic needs at least one partition, got {partitions}"
    hash_value = java_string_hashcode(group_id)
    magnitude = 0 if hash_value == _INT32_MIN else abs(hash_value)
    return magnitude % partitions
