"""A seeded fuzz campaign against a real ``strom broker``: at least 100,000 frames built from valid
requests of every API and version the broker advertises, most of them mutated, pipelined on
several connections, while a canary client beside them produces and fetches.

INVARIANTS asserted at the end:
- the broker never crashes and its log holds no traceback (every peer mistake became an error code
  or a closed connection, never an exception);
- the canary's produce-then-fetch round trips (a process of its own, `tests.fuzz.canary`) all
  succeed, none taking more than 1 s beyond what the canary and the broker waited for a CPU;
- the broker's resident memory stays within a bound above what it used once set up.

The frames: ``RequestFactory`` builds valid requests (names of real topics and groups, extreme
integers, nulls, real and corrupt record batches); ``mutations.mutate`` damages most of them
(flipped, overwritten, inserted or cut bytes, another version or API, now and then a lying size).
``mutations.classify`` predicts with strom's own decoder which frames make the broker close the
connection; each batch a connection sends holds at most one, last, then a sentinel ApiVersions
request whose answer says the whole batch was handled. Requests that would create more than 64
partitions or roll segments on every append are not sent: thousands of partitions and segments are
issue 11's file-descriptor budget, tested on their own. A connection that makes no progress for a
second (a parked JoinGroup, a long poll a mutation made long) is abandoned for a new one.

``STROM_FUZZ_SEED`` and ``STROM_FUZZ_FRAMES`` replay another seed or run longer; ``STROM_FUZZ_LOG``
names a file to keep the broker's log in.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from strom.base import limits
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME
from strom.protocol.errors import ErrorCode
from strom.protocol.headers import encode_request
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.conftest import BrokerProcess
from tests.compat.wire import WireClient
from tests.fuzz.mutations import Fate, classify, mutate
from tests.fuzz.request_factory import SEGMENT_ROLLING_KEYS, RequestFactory

pytestmark = pytest.mark.compat

SEED = int(os.environ.get("STROM_FUZZ_SEED", "20261122"))
FRAMES_MIN = int(os.environ.get("STROM_FUZZ_FRAMES", "100000"))
KEEP_LOG_PATH = os.environ.get("STROM_FUZZ_LOG", "")
CONNECTIONS = 16
BATCH_FRAMES = 32
FRAMES_PER_API_VERSION = 40
MUTATED_FRACTION = 0.7
# At most this share of the frames sent are ones that close their connection: enough to exercise
# the closing path thousands of times without spending the campaign on reconnecting.
CLOSING_FRACTION_MAX = 0.08
PARTITIONS_CREATED_MAX = 64
NO_PROGRESS_ABANDON_S = 1.0
CAMPAIGN_DEADLINE_S = 300.0
CANARY_STALL_S_MAX = 1.0
# Above the RSS the broker had once set up. 100,000 frames grew it by about 5 MiB (a few hundred
# small topics and groups); a leak of a kilobyte per request would pass this bound.
RSS_GROWTH_BYTES_MAX = 96 * 1024 * 1024
# A new group rebalances at once, so sensible joins complete instead of parking their connection.
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
SIZE = struct.Struct(">i")
SENTINEL_CORRELATION_BASE = 1 << 30
API_VERSIONS_KEY = 18
FUZZ_TOPICS = ("fuzz-a", "fuzz-b", "fuzz-compact")
FUZZ_GROUPS = ("fuzz-group", "fuzz-group-2")
CANARY_TOPIC = "canary-7f3c"
# The canary's topic pins every config a fuzzed AlterConfigs on the broker could change under it.
CANARY_CONFIGS = {
    "max.message.bytes": "1048588",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
}


# -- set-up -------------------------------------------------------------------------------------


def _create_topics(client: WireClient) -> None:
    topics = [
        CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=2,
            replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")]
            if "compact" in name
            else [],
        )
        for name in FUZZ_TOPICS
    ]
    topics.append(
        CreateTopicsRequest.CreatableTopic(
            name=CANARY_TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs=[
                CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in CANARY_CONFIGS.items()
            ],
        )
    )
    response = client.round_trip(
        CreateTopicsRequest(topics=topics, timeout_ms=30_000), CreateTopicsResponse, 5
    )
    assert all(topic.error_code == ErrorCode.NONE for topic in response.topics), response
    found = client.round_trip(FindCoordinatorRequest(key=FUZZ_GROUPS[0]), FindCoordinatorResponse, 1)
    assert found.error_code == ErrorCode.NONE


def _advertised(client: WireClient) -> dict[int, tuple[int, int]]:
    """Every API the broker serves: asked as strom's client asks, so strom's own APIs are listed too."""
    request = ApiVersionsRequest(client_software_name=STROM_CLIENT_SOFTWARE_NAME, client_software_version="0")
    response = client.round_trip(request, ApiVersionsResponse, 3)
    return {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}


def _topic_ids(client: WireClient) -> list[Any]:
    names = [MetadataRequest.MetadataRequestTopic(name=name) for name in FUZZ_TOPICS]
    response = client.round_trip(
        MetadataRequest(topics=names, allow_auto_topic_creation=False), MetadataResponse, 12
    )
    return [topic.topic_id for topic in response.topics]


def _hogs_resources(request: object) -> bool:
    """Whether the request would create many partitions or make logs roll a segment per append."""
    name = type(request).__name__
    if name == "CreateTopicsRequest":
        topics: list[Any] = getattr(request, "topics", [])
        partitions = sum(max(topic.num_partitions, len(topic.assignments), 1) for topic in topics)
        keys = {config.name for topic in topics for config in topic.configs}
        return partitions > PARTITIONS_CREATED_MAX or bool(keys & SEGMENT_ROLLING_KEYS)
    if name == "CreatePartitionsRequest":
        return sum(max(topic.count, 0) for topic in getattr(request, "topics", [])) > PARTITIONS_CREATED_MAX
    if name in ("AlterConfigsRequest", "IncrementalAlterConfigsRequest"):
        keys = {config.name for resource in getattr(request, "resources", []) for config in resource.configs}
        return bool(keys & SEGMENT_ROLLING_KEYS)
    return False


def _corpus(factory: RequestFactory, advertised: dict[int, tuple[int, int]]) -> list[bytes]:
    """Valid frames of every advertised API at every advertised version."""
    from strom.protocol.api import request_class

    frames: list[bytes] = []
    correlation = itertools.count(1)
    for api_key, (low, high) in sorted(advertised.items()):
        request_type = request_class(api_key)
        for version in range(low, high + 1):
            made = 0
            while made < FRAMES_PER_API_VERSION:
                frame = factory.frame(request_type, version, next(correlation))
                fate, request = classify(frame)
                assert fate is Fate.ANSWERED, f"a valid {request_type.__name__} v{version} does not decode"
                if _hogs_resources(request):
                    continue
                frames.append(frame)
                made += 1
    return frames


# -- the fuzzing connections --------------------------------------------------------------------


@dataclass
class Figures:
    frames_sent: int = 0
    frames_handled: int = 0
    frames_mutated: int = 0
    closing_frames_sent: int = 0
    responses: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    closed_unexpectedly: int = 0
    abandoned: int = 0
    skipped_hogs: int = 0
    rss_bytes_start: int = 0
    rss_bytes_max: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    fuzzer_cpu_s: float = 0.0
    apis: set[int] = field(default_factory=set)


class BatchMaker:
    def __init__(self, rng: random.Random, corpus: list[bytes], figures: Figures) -> None:
        self.rng = rng
        self.corpus = corpus
        self.figures = figures

    def next_batch(self) -> tuple[list[bytes], bool]:
        """Up to BATCH_FRAMES frames; True when the last one should make the broker close."""
        batch: list[bytes] = []
        figures = self.figures
        while len(batch) < BATCH_FRAMES:
            frame = self.rng.choice(self.corpus)
            if self.rng.random() < MUTATED_FRACTION:
                frame = mutate(self.rng, frame)
                mutated = True
            else:
                mutated = False
            fate, request = classify(frame)
            if fate is Fate.CLOSES:
                if figures.closing_frames_sent >= CLOSING_FRACTION_MAX * max(figures.frames_sent, 1):
                    continue
                figures.closing_frames_sent += 1
                figures.frames_mutated += mutated
                batch.append(frame)
                return batch, True
            if _hogs_resources(request):
                figures.skipped_hogs += 1
                continue
            figures.frames_mutated += mutated
            figures.apis.add(SIZE.unpack_from(frame, SIZE.size)[0] >> 16)
            batch.append(frame)
        return batch, False


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), NO_PROGRESS_ABANDON_S))
    return await asyncio.wait_for(reader.readexactly(size), NO_PROGRESS_ABANDON_S)


async def _fuzz_connection(port: int, maker: BatchMaker, figures: Figures, deadline: float) -> None:
    sentinel_ids = itertools.count(SENTINEL_CORRELATION_BASE)
    sentinel_body = ApiVersionsRequest().encode(0)
    while figures.frames_handled < FRAMES_MIN and time.monotonic() < deadline:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        figures.connections += 1
        try:
            while figures.frames_handled < FRAMES_MIN and time.monotonic() < deadline:
                batch, closes = maker.next_batch()
                sentinel = next(sentinel_ids)
                writer.write(
                    b"".join(batch) + encode_request(API_VERSIONS_KEY, 0, sentinel, None, sentinel_body)
                )
                figures.frames_sent += len(batch)
                try:
                    await writer.drain()
                    while True:
                        response = await _read_frame(reader)
                        figures.responses += 1
                        if SIZE.unpack_from(response)[0] == sentinel:
                            figures.frames_handled += len(batch)
                            break
                except TimeoutError:
                    figures.abandoned += 1
                    break
                except (asyncio.IncompleteReadError, ConnectionError):
                    figures.frames_handled += len(batch)  # the last one closed it, as foreseen
                    figures.closed_by_broker += 1
                    if not closes:
                        figures.closed_unexpectedly += 1
                    break
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _around_traceback(log: str, before: int = 5, after: int = 60) -> str:
    """The log lines around its first traceback (the tail of a long log would not show it)."""
    lines = log.splitlines()
    at = next(index for index, line in enumerate(lines) if "Traceback" in line)
    return "\n".join(lines[max(at - before, 0) : at + after])


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def _sample_rss(pid: int, figures: Figures, stop: asyncio.Event) -> None:
    while not stop.is_set():
        figures.rss_bytes_max = max(figures.rss_bytes_max, _rss_bytes(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def _campaign(broker: BrokerProcess, corpus: list[bytes], figures: Figures) -> None:
    rng = random.Random(SEED + 1)
    maker = BatchMaker(rng, corpus, figures)
    deadline = time.monotonic() + CAMPAIGN_DEADLINE_S
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_rss(broker.pid, figures, stop))
    try:
        await asyncio.gather(
            *(_fuzz_connection(broker.port, maker, figures, deadline) for _ in range(CONNECTIONS))
        )
    finally:
        stop.set()
        await sampler


# -- the canary ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _canary(broker: BrokerProcess) -> Iterator[dict[str, Any]]:
    """Runs ``tests.fuzz.canary`` beside the campaign; the dict it yields is filled with the
    canary's figures when the block ends (closing its standard input stops it)."""
    figures: dict[str, Any] = {}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fuzz.canary", str(broker.port), CANARY_TOPIC, str(broker.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        yield figures
    finally:
        output, _ = process.communicate(timeout=60)
        figures.update(json.loads(output))


# -- a live group -------------------------------------------------------------------------------


@dataclass
class LiveMember:
    """A real confluent-kafka consumer in one of the fuzzed groups, so fuzzed joins, heartbeats,
    commits and leaves meet a group that has a member, a leader and a generation. What happens to
    it is not asserted (the fuzzer keeps rebalancing its group); only that the broker survives."""

    bootstrap: str
    stop: threading.Event = field(default_factory=threading.Event)
    polls: int = 0

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": FUZZ_GROUPS[0],
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6_000,
                "max.poll.interval.ms": 6_000,
                "log_level": 0,
            }
        )
        try:
            # The canary's topic is never deleted, so the member has something to join for.
            consumer.subscribe([CANARY_TOPIC, *FUZZ_TOPICS[:2]])
            while not self.stop.is_set():
                consumer.poll(0.1)
                self.polls += 1
        finally:
            consumer.close()


# -- the test -----------------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    """A broker whose data lives in memory (tmpfs) when the machine has one: the campaign measures
    how the broker answers, not how fast a shared disk fsyncs the offsets fuzzed commits write."""
    memory = Path("/dev/shm")
    work_dir = Path(tempfile.mkdtemp(prefix="strom-fuzz-", dir=memory)) if memory.is_dir() else tmp_path
    process = BrokerProcess(work_dir / "broker", BROKER_SETTINGS)
    process.work_dir.mkdir(parents=True)
    try:
        process.start()
        yield process
    finally:
        process.close()
        if work_dir != tmp_path:
            shutil.rmtree(work_dir, ignore_errors=True)


def test_fuzz_campaign_against_a_real_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    with WireClient(broker.port, timeout_s=30.0) as client:
        _create_topics(client)
        advertised = _advertised(client)
        factory = RequestFactory(rng, [*FUZZ_TOPICS, "absent-topic"], _topic_ids(client), FUZZ_GROUPS)
    corpus = _corpus(factory, advertised)
    figures = Figures(rss_bytes_start=_rss_bytes(broker.pid))
    member = LiveMember(broker.bootstrap)
    member_thread = threading.Thread(target=member.run, name="live-member", daemon=True)
    started = time.monotonic()
    broker_cpu_start, own_cpu_start = _cpu_seconds(broker.pid), time.process_time()
    member_thread.start()
    try:
        with _canary(broker) as canary:
            asyncio.run(_campaign(broker, corpus, figures))
    finally:
        member.stop.set()
        member_thread.join(60)
    figures.seconds = time.monotonic() - started
    figures.broker_cpu_s = _cpu_seconds(broker.pid) - broker_cpu_start
    figures.fuzzer_cpu_s = time.process_time() - own_cpu_start
    summary = (
        f"seed {SEED}: {figures.frames_handled} frames handled ({figures.frames_sent} sent, "
        f"{figures.frames_mutated} mutated, {figures.closing_frames_sent} closing) on "
        f"{figures.connections} connections in {figures.seconds:.1f} s "
        f"({figures.frames_handled / figures.seconds:.0f} frames/s); {figures.responses} responses; "
        f"{figures.closed_by_broker} closed by the broker ({figures.closed_unexpectedly} unforeseen), "
        f"{figures.abandoned} abandoned, {figures.skipped_hogs} resource hogs skipped; "
        f"{len(figures.apis)} API keys; canary {canary['round_trips']} round trips, longest "
        f"{canary['longest_s'] * 1000:.0f} ms ({canary['longest_charged_s'] * 1000:.0f} ms less CPU waits); broker RSS {figures.rss_bytes_start / 2**20:.0f} MiB -> "
        f"max {figures.rss_bytes_max / 2**20:.0f} MiB; CPU: broker {figures.broker_cpu_s:.1f} s, "
        f"fuzzer and canary {figures.fuzzer_cpu_s:.1f} s"
    )
    log = broker.log_text()
    if KEEP_LOG_PATH:
        Path(KEEP_LOG_PATH).write_text(log)
    peer_lines = [line for line in log.splitlines() if " strom.broker.peer: " in line]
    # The peer-fault warnings are rate-limited: a burst, then a few a second, however many closes.
    peer_lines_max = limits.peer_fault_log_lines_burst + limits.peer_fault_log_lines_per_s * (
        figures.seconds + 30
    )
    summary += f"; {len(peer_lines)} peer-fault log lines for {figures.closed_by_broker} closes"
    print(summary)
    assert broker.running, f"the broker died: {summary}\n{broker.log_tail()}"
    assert "Traceback" not in log, f"traceback in the broker log: {summary}\n{_around_traceback(log)}"
    assert figures.frames_handled >= FRAMES_MIN, summary
    assert figures.apis == set(advertised), f"APIs never sent: {set(advertised) - figures.apis}"
    assert not canary["failures"], f"{canary['failures']}: {summary}"
    assert canary["round_trips"] > 0, summary
    assert canary["longest_charged_s"] <= CANARY_STALL_S_MAX, summary
    assert figures.rss_bytes_max - figures.rss_bytes_start <= RSS_GROWTH_BYTES_MAX, summary
    assert len(peer_lines) <= peer_lines_max, summary
    assert any("similar lines suppressed" in line for line in peer_lines), summary
