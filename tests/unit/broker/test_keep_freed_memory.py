"""The broker keeps freed memory for reuse (glibc's mallopt), so that taking in produce requests of
a megabyte, again and again, does not touch fresh pages each time. Each case runs in a process of
its own: the setting is for the whole process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

# Four blocks of 1 MiB taken and given back, 50 times over, after two rounds of warm-up: the page
# faults (first touches of fresh memory) of those 50 rounds.
PROBE = """
import resource, sys
from strom.broker.run import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def rounds(count):
    for _ in range(count):
        blocks = [bytearray(1 << 20) for _ in range(4)]
        for block in blocks:
            block[::4096] = bytes(len(block[::4096]))
        del blocks
rounds(2)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(50)
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(mode: str, **environment: str) -> tuple[str, int]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env | environment, capture_output=True, text=True, check=True
    )
    kept, faults = result.stdout.split()
    return kept, int(faults)


def test_kept_memory_is_reused_without_fresh_pages() -> None:
    kept, faults = _probe("keep")
    assert kept == "True"
    _, faults_by_default = _probe("default")
    # 4 MiB reused 50 times: a page fault would be one of 51,200 pages touched.
    assert faults < 100, (faults, faults_by_default)


def test_the_operators_own_malloc_settings_win() -> None:
    kept, faults = _probe("keep", MALLOC_TRIM_THRESHOLD_="0")
    assert kept == "False"
    assert faults > 10_000  # everything given back at once, so every round touches fresh pages
