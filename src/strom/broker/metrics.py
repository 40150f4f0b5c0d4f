"""Broker metrics in the Prometheus text format, served over HTTP at ``/metrics``.

Names follow Kafka's JMX metrics as the Prometheus JMX exporter renders them with the rules most
Grafana dashboards are built on (lower-cased ``kafka_<domain>_<type>_<name>``, ``...PerSec`` meters
as ``_total`` counters), consumer-group offsets and lag as kafka_exporter names them, and the
standard ``process_*`` names; what strom adds is ``strom_*``. ``docs/metrics.md`` lists every
family with the Kafka MBean it stands for; ``docs/grafana-dashboard.json`` charts them.

Cost on the hot path: counters are plain numbers updated on the event loop (one owner, no locks),
once per request and per partition in it, never per record (messages are counted from each batch
header's record count). Gauges that describe state (log sizes and offsets, committed offsets and
lag, groups, replication) are computed when the page is scraped, from the objects that own the
state, so they can never drift from it. The families that grow with the data are bounded
(``limits.metrics_*``): past a bound they are summarised, and sums stay exact.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import os
import resource
import struct
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.base import limits
from strom.coordinator.history import DURATION_BUCKETS_MS, Trigger
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.connection_budget import ConnectionBudget
    from strom.broker.state import BrokerState
    from strom.cluster.metadata_image import MetadataImage
    from strom.cluster.replica import PartitionLeader

log = logging.getLogger("strom.broker.metrics")

# Request total time buckets in ms (Kafka measures request times in ms): a produce with fsync lands
# in the middle, a long-polling fetch at the top.
REQUEST_TIME_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
# Flush (fsync) time buckets in ms: a page-cache flush of a few pages to a slow disk's seconds.
FLUSH_TIME_BUCKETS_MS = (0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000, 5000)
# The metrics request is a GET line and a few headers; anything longer is not a scraper.
HTTP_REQUEST_BYTES_MAX = 8192
# The label values that stand for "the rest": not legal topic names, so they never collide with one.
OTHER_TOPICS_LABEL = "(other)"
ALL_PARTITIONS_LABEL = "(all)"
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
# Fetch is two request names in Kafka's metrics: from consumers and from follower replicas.
FETCH_API_KEY = 1
PRODUCE_API_KEY = 0
FETCH_CONSUMER = "FetchConsumer"
FETCH_FOLLOWER = "FetchFollower"
FETCH_REPLICA_STATE_MIN_VERSION = 15

# A record batch's length (after its first 12 bytes) and its record count, read in one call.
_BATCH_LENGTH_AND_COUNT = struct.Struct(">8xi45xi")
_BATCH_HEADER_BYTES = _BATCH_LENGTH_AND_COUNT.size  # 61
_LOG_OVERHEAD_BYTES = 12


def records_in(data: bytes | bytearray | memoryview | None) -> int:
    """Records in the v2 batches of ``data``, from each batch header's record count (a last batch
    cut short, as a fetch at its size limit sends it, counts by its header).

    Never raises: it also counts what nobody validated (an acks=0 produce is counted as it came),
    so it stops at the first length that cannot be a batch's."""
    if not data:
        return 0
    unpack = _BATCH_LENGTH_AND_COUNT.unpack_from
    end = len(data)
    position = 0
    count = 0
    while end - position >= _BATCH_HEADER_BYTES:
        length, records = unpack(data, position)
        if length < _BATCH_HEADER_BYTES - _LOG_OVERHEAD_BYTES:
            break  # no batch (an acks=0 produce is counted whatever it holds): nothing more to count
        count += max(records, 0)
        position += length + _LOG_OVERHEAD_BYTES
    return count


class Histogram:
    """Cumulative-on-render bucket counts over fixed bounds; observations in seconds."""

    __slots__ = ("bounds_s", "bucket_counts", "count", "total_s")

    def __init__(self, bounds_ms: tuple[float, ...]) -> None:
        self.bounds_s = tuple(bound / 1000 for bound in bounds_ms)
        self.bucket_counts = [0] * (len(bounds_ms) + 1)  # the last is above every bound
        self.count = 0
        self.total_s = 0.0

    def observe(self, seconds: float) -> None:
        self.bucket_counts[bisect.bisect_left(self.bounds_s, seconds)] += 1
        self.count += 1
        self.total_s += seconds


class RequestMetrics:
    """Kafka's ``RequestMetrics`` of one request name: requests by version, and where their time went.

    queue: from the read that completed the request to its handling (it waited behind the other
    requests of its connection). local: handling, less remote. remote: parked waiting on something
    else (a fetch's long poll, a join or sync waiting for the group, a commit waiting for its write).
    response queue: from the answer to its write (encoding, and the other answers of the same read,
    which go out in one write). send: the write of the answer to the socket. total: all of it.
    """

    __slots__ = (
        "errors",
        "local_s",
        "name",
        "queue_s",
        "remote_s",
        "requests_by_version",
        "response_queue_s",
        "send_s",
        "total",
        "walks",
    )

    def __init__(self, name: str, max_version: int) -> None:
        self.name = name
        self.requests_by_version = [0] * (max_version + 1)
        self.errors: dict[int, int] = defaultdict(int)  # error code -> occurrences in answers
        # Where the error codes of this request's answers are, by version (see ``walk_for``).
        self.walks: list[_Walk | None] = [None] * (max_version + 1)
        self.total = Histogram(REQUEST_TIME_BUCKETS_MS)
        self.queue_s = 0.0
        self.local_s = 0.0
        self.remote_s = 0.0
        self.response_queue_s = 0.0
        self.send_s = 0.0

    def observe(
        self, received: float, started: float, ended: float, remote: float, sending: float, sent: float
    ) -> None:
        """One request's times (``time.perf_counter`` readings, ``remote`` a duration)."""
        self.queue_s += started - received
        self.local_s += ended - started - remote
        self.remote_s += remote
        self.response_queue_s += sending - ended
        self.send_s += sent - sending
        total = self.total
        total.bucket_counts[bisect.bisect_left(total.bounds_s, sent - received)] += 1
        total.count += 1
        total.total_s += sent - received

    def count_errors(self, response: Any, version: int) -> None:
        """Count the error codes of one answer (as Kafka's ``errorCounts()`` finds them)."""
        walk = self.walks[version]
        if walk is None:
            walk = self.walks[version] = walk_for(type(response), version)
        _count_codes(response, walk, self.errors)


class ConnectionTimes:
    """One connection's request in progress (its remote wait so far) and its answers not yet written."""

    __slots__ = ("remote_s", "unsent")

    def __init__(self) -> None:
        self.remote_s = 0.0
        # (metrics, received, started, ended, remote) of each answer made but not yet written
        self.unsent: list[tuple[RequestMetrics, float, float, float, float]] = []


# The connection whose request is being handled: every connection loop is a task of its own, so a
# context variable set once per connection finds it from wherever its handler waits.
_current_connection: ContextVar[ConnectionTimes | None] = ContextVar("strom_connection_times", default=None)


def bind_connection_times(times: ConnectionTimes) -> None:
    """Called once by a connection's task: the waits its handlers report are counted to it."""
    _current_connection.set(times)


def add_remote_wait(seconds: float) -> None:
    """A handler of the current connection waited ``seconds`` on something else (RemoteTimeMs)."""
    times = _current_connection.get()
    if times is not None:
        times.remote_s += seconds


class TopicCounters:
    """Kafka's per-topic ``BrokerTopicMetrics``: what was appended to and read from one topic."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch_requests",
        "failed_produce_requests",
        "fetch_requests",
        "messages_in",
        "messages_out",
        "produce_requests",
    )

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.messages_out = 0
        self.produce_requests = 0  # partitions produced to (Kafka counts per partition)
        self.failed_produce_requests = 0
        self.fetch_requests = 0  # partitions fetched from
        self.failed_fetch_requests = 0


@dataclass(frozen=True)
class ReplicationGauges:
    """What Kafka's ReplicaManager, ReplicaFetcherManager and KafkaController metrics say.

    The controller's figures (offline partitions, topics and partitions of the cluster, preferred
    replica imbalance, unclean elections) are reported by the active controller and 0 elsewhere, as
    in Kafka, so a sum over every broker counts each once."""

    partitions: int  # replicas this broker holds (PartitionCount)
    leaders: int  # partitions it leads (LeaderCount)
    under_replicated: int  # led partitions with fewer in-sync replicas than replicas
    under_min_isr: int  # led partitions with fewer in-sync replicas than min.insync.replicas
    at_min_isr: int  # led partitions with exactly min.insync.replicas in-sync replicas
    offline_partitions: int  # partitions without a live leader (the controller reports it, others 0)
    active_controller: int  # 1 on the controller
    global_topics: int  # topics in the cluster (the controller reports it, others 0)
    global_partitions: int
    preferred_replica_imbalance: int = 0  # partitions not led by their first replica (controller)
    isr_shrinks: int = 0  # counters: ISR changes of partitions led here since the broker started
    isr_expands: int = 0
    replica_max_lag: int = 0  # records the furthest-behind followed partition lacks (MaxLag)
    unclean_leader_elections: int = 0  # counter: elections this broker made as controller


def single_node_replication(state: BrokerState) -> ReplicationGauges:
    """One broker holds and leads every partition, with one replica each: nothing can lag."""
    partitions = sum(1 for _ in state.logs.logs())
    return ReplicationGauges(
        partitions=partitions,
        leaders=partitions,
        under_replicated=0,
        under_min_isr=0,
        at_min_isr=0,
        offline_partitions=0,
        active_controller=1,
        global_topics=len(state.logs.topic_names()),
        global_partitions=partitions,
    )


def cluster_replication_gauges(
    leaders: Iterable[PartitionLeader],
    followed: int,
    metadata: MetadataImage,
    *,
    is_controller: bool,
    isr_changes_total: Mapping[str, int],
    replica_max_lag: int,
    unclean_leader_elections: int,
) -> ReplicationGauges:
    """A broker of a cluster: its own partitions from the replica state of those it leads
    (``PartitionLeader``: replicas, ISR, min.insync.replicas) and the count it follows; the
    cluster's from the controller's metadata image, when this broker is the controller.

    A pending ISR change does not count until the controller agreed to it, as in Kafka."""
    leaders_count = under_replicated = under_min_isr = at_min_isr = 0
    for leader in leaders:
        leaders_count += 1
        in_sync = len(leader.isr)
        if in_sync < len(leader.replicas):
            under_replicated += 1
        if in_sync < leader.min_insync_replicas:
            under_min_isr += 1
        elif in_sync == leader.min_insync_replicas:
            at_min_isr += 1
    offline = topics = partitions = imbalance = 0
    if is_controller:
        live = metadata.brokers
        for topic in metadata.topics.values():
            topics += 1
            for info in topic.partitions.values():
                partitions += 1
                if info.leader not in live:
                    offline += 1
                elif info.replicas and info.leader != info.replicas[0]:
                    imbalance += 1
    return ReplicationGauges(
        partitions=leaders_count + followed,
        leaders=leaders_count,
        under_replicated=under_replicated,
        under_min_isr=under_min_isr,
        at_min_isr=at_min_isr,
        offline_partitions=offline,
        active_controller=1 if is_controller else 0,
        global_topics=topics,
        global_partitions=partitions,
        preferred_replica_imbalance=imbalance,
        isr_shrinks=isr_changes_total.get("shrink", 0),
        isr_expands=isr_changes_total.get("expand", 0),
        replica_max_lag=replica_max_lag,
        unclean_leader_elections=unclean_leader_elections,
    )


def broker_replication(state: BrokerState) -> ReplicationGauges:
    """The replication figures of this broker: a single node's constants, or its cluster's view."""
    cluster = state.cluster
    if cluster is None:
        return single_node_replication(state)
    roles = cluster.roles
    return cluster_replication_gauges(
        (entry.leader for entry in roles.led.values()),
        len(roles.followed),
        cluster.control.metadata,
        is_controller=cluster.is_controller,
        isr_changes_total=roles.isr_changes_total,
        replica_max_lag=roles.replica_max_lag(),
        unclean_leader_elections=len(cluster.unclean_elections),
    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# -- error codes of any response -------------------------------------------------------------------

# A walk over a response: (attribute, None) for an error code, (attribute, sub-walk) for a struct
# or an array of structs. Built once per message class and version from its FIELDS.
_Walk = tuple[tuple[str, Any], ...]
_WALKS: dict[tuple[type, int], _Walk] = {}


def _walk_for(top: type, cls: type, version: int) -> _Walk:
    steps: list[tuple[str, Any]] = []
    for spec in getattr(cls, "FIELDS", ()):
        low, high = spec.versions
        if not low <= version <= high:
            continue
        if spec.name == "error_code" and spec.type == "int16":
            steps.append((spec.name, None))
            continue
        struct_name = spec.type.removeprefix("[]")
        nested = getattr(top, struct_name, None)
        if isinstance(nested, type) and hasattr(nested, "FIELDS"):
            sub = _walk_for(top, nested, version)
            if sub:
                steps.append((spec.name, sub))
    return tuple(steps)


def _count_codes(node: Any, walk: _Walk, errors: dict[int, int]) -> None:
    for attribute, sub in walk:
        value = getattr(node, attribute)
        if sub is None:
            errors[value] += 1
        elif isinstance(value, list):
            for item in value:
                _count_codes(item, sub, errors)
        elif value is not None:
            _count_codes(value, sub, errors)


def walk_for(response_type: type, version: int) -> _Walk:
    """Where the error codes of a response of this type and version are (cached)."""
    walk = _WALKS.get((response_type, version))
    if walk is None:
        walk = _WALKS[(response_type, version)] = _walk_for(response_type, response_type, version)
    return walk


def error_counts(response: Any, version: int) -> dict[int, int]:
    """Every error code in ``response`` (top level and nested, NONE included), as Kafka's
    ``errorCounts()`` sees a response: the codes of the fields its version has."""
    errors: dict[int, int] = defaultdict(int)
    _count_codes(response, walk_for(type(response), version), errors)
    return dict(errors)


# -- the metrics --------------------------------------------------------------------------------------


def _count_answered(counters: Any, errors: dict[int, int], records: Any, code: int) -> None:
    """One answered partition of a Produce: its error code, and the topic's counters (None: a
    topic the broker does not have)."""
    errors[code] += 1
    if counters is None:
        return
    counters.produce_requests += 1
    if code:
        counters.failed_produce_requests += 1
    else:
        counters.bytes_in += len(records) if records else 0
        counters.messages_in += records_in(records)


class BrokerMetrics:
    def __init__(self) -> None:
        self.requests: dict[str, RequestMetrics] = {}
        self.topics: dict[str, TopicCounters] = {}
        self.other_topics = TopicCounters()  # topics past limits.metrics_topics_max
        self.flushes = Histogram(FLUSH_TIME_BUCKETS_MS)
        self.bytes_in_total = 0
        self.bytes_out_total = 0
        self.connections_open = 0
        self.connections_total = 0
        self.connections_closed_total: dict[str, int] = defaultdict(int)  # by reason: idle, slow request
        self.connection_budget: ConnectionBudget | None = None  # the server's, read when scraped
        # The replication figures, computed when scraped (a single node's or its cluster's).
        self.replication: Callable[[BrokerState], ReplicationGauges] = broker_replication
        self.started_wall_s = time.time()

    # -- counting (on the event loop) ----------------------------------------------------------------

    def request_metrics(self, name: str, max_version: int) -> RequestMetrics:
        found = self.requests.get(name)
        if found is None:
            found = self.requests[name] = RequestMetrics(name, max_version)
        return found

    def observe_flush(self, seconds: float) -> None:
        self.flushes.observe(seconds)

    def _topic(self, state: BrokerState, name: str) -> TopicCounters | None:
        """The counters of an existing topic (None for a name no topic has: a client may send any)."""
        counters = self.topics.get(name)
        if counters is None:
            if state.logs.topic(name) is None:
                return None
            if len(self.topics) >= limits.metrics_topics_max:
                return self.other_topics
            counters = self.topics[name] = TopicCounters()
        return counters

    def count_response(
        self,
        state: BrokerState,
        request_metrics: RequestMetrics,
        api_key: int,
        version: int,
        request: Any,
        response: Any,
    ) -> None:
        """Errors by code, and for Produce and Fetch the per-topic traffic (per partition, never per record)."""
        if api_key == PRODUCE_API_KEY:
            self._count_produce(state, request_metrics.errors, request, response)
        elif api_key == FETCH_API_KEY:
            self._count_fetch(state, request_metrics.errors, version, response)
        elif response is not None:
            request_metrics.count_errors(response, version)

    def _count_produce(self, state: BrokerState, errors: dict[int, int], request: Any, response: Any) -> None:
        if response is None:
            # acks=0 has no answer to read errors from: a partition of an existing topic counts as
            # appended (the client was promised nothing more), one of an unknown topic as failed.
            for topic_data in request.topic_data:
                counters = self._topic(state, topic_data.name)
                for partition_data in topic_data.partition_data:
                    if counters is None or state.logs.log(topic_data.name, partition_data.index) is None:
                        errors[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] += 1
                        if counters is not None:
                            counters.produce_requests += 1
                            counters.failed_produce_requests += 1
                        continue
                    records = partition_data.records
                    counters.produce_requests += 1
                    counters.bytes_in += len(records) if records else 0
                    counters.messages_in += records_in(records)
                    errors[ErrorCode.NONE] += 1
            return
        topics = request.topic_data
        answers = response.responses
        if len(topics) == 1 and len(answers) == 1:
            # One topic (what a producer at linger.ms=0 sends): the loop below, without the zips.
            topic_data = topics[0]
            partitions = topic_data.partition_data
            partition_answers = answers[0].partition_responses
            if len(partitions) == 1 and len(partition_answers) == 1:
                counters = self.topics.get(topic_data.name) or self._topic(state, topic_data.name)
                _count_answered(counters, errors, partitions[0].records, partition_answers[0].error_code)
                return
        for topic_data, topic_response in zip(topics, answers, strict=True):
            counters = self._topic(state, topic_data.name)
            for partition_data, answer in zip(
                topic_data.partition_data, topic_response.partition_responses, strict=True
            ):
                _count_answered(counters, errors, partition_data.records, answer.error_code)

    def _count_fetch(self, state: BrokerState, errors: dict[int, int], version: int, response: Any) -> None:
        if version >= 7:
            errors[response.error_code] += 1
        by_id = version >= 13
        for topic_response in response.responses:
            if by_id:
                topic = state.logs.topic_by_id(topic_response.topic_id)
                counters = self._topic(state, topic.name) if topic is not None else None
            else:
                counters = self._topic(state, topic_response.topic)
            for partition in topic_response.partitions:
                code = partition.error_code
                errors[code] += 1
                if counters is None:
                    continue
                counters.fetch_requests += 1
                if code:
                    counters.failed_fetch_requests += 1
                    continue
                records = partition.records
                if records:
                    counters.bytes_out += len(records)
                    counters.messages_out += records_in(records)

    # -- the page -------------------------------------------------------------------------------------

    def render(self, state: BrokerState) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        self._render_requests(lines, family)
        self._render_topics(lines, family, state)
        self._render_logs(lines, family, state)
        self._render_replication(lines, family, state)
        self._render_groups(lines, family, state)
        self._render_process(lines, family)
        self._render_connections(lines, family)
        self._render_quotas(lines, family, state)
        return "\n".join(lines) + "\n"

    @staticmethod
    def _render_quotas(lines: list[str], family: Callable[[str, str, str], None], state: BrokerState) -> None:
        """One series per quota group in use (Kafka's per-(user, client-id) quota metrics): the
        entity whose quota applies, its bound, the rate now, what was charged and the throttling."""
        groups = sorted(state.quotas.manager.groups(), key=lambda group: -group.total)
        if not groups:
            return
        groups = sorted(groups[: limits.metrics_quota_groups_max], key=lambda group: group.key)
        now_ms = state.quotas.clock.monotonic_ms()
        labelled = [
            (
                f'quota_type="{group.key.quota_type}",user="{_escape(group.key.user)}",'
                f'client_id="{_escape(group.key.client_id)}",entity="{_escape(group.entity.path())}"',
                group,
            )
            for group in groups
        ]
        family("strom_quota_bound", "gauge", "The quota in force (bytes/s, or percent of a thread).")
        lines.extend(f"strom_quota_bound{{{labels}}} {group.bound:g}" for labels, group in labelled)
        family("strom_quota_rate", "gauge", "The rate over the quota window now, in the quota's unit.")
        lines.extend(
            f"strom_quota_rate{{{labels}}} {group.rate.rate_per_s(now_ms):.3f}" for labels, group in labelled
        )
        family(
            "strom_quota_charged_total",
            "counter",
            "What was charged to the quota: bytes, or percent-seconds of a thread for request_percentage.",
        )
        lines.extend(f"strom_quota_charged_total{{{labels}}} {group.total:.0f}" for labels, group in labelled)
        family(
            "strom_quota_throttle_time_ms_total", "counter", "Throttle time given to clients of the group."
        )
        lines.extend(
            f"strom_quota_throttle_time_ms_total{{{labels}}} {group.throttle_ms_total}"
            for labels, group in labelled
        )
        family("strom_quota_throttled_total", "counter", "Answers that carried a throttle time.")
        lines.extend(
            f"strom_quota_throttled_total{{{labels}}} {group.throttled_total}" for labels, group in labelled
        )

    def _render_requests(self, lines: list[str], family: Callable[[str, str, str], None]) -> None:
        requests = sorted(self.requests.values(), key=lambda item: item.name)
        family(
            "kafka_network_requestmetrics_requests_total",
            "counter",
            "Requests handled, by request name and version (RequestMetrics RequestsPerSec).",
        )
        for metrics in requests:
            for version, count in enumerate(metrics.requests_by_version):
                if count:
                    lines.append(
                        f'kafka_network_requestmetrics_requests_total{{request="{metrics.name}",version="{version}"}} {count}'
                    )
        family(
            "kafka_network_requestmetrics_errors_total",
            "counter",
            "Error codes in answers, NONE included, by request name and error (RequestMetrics ErrorsPerSec).",
        )
        for metrics in requests:
            for code, count in sorted(metrics.errors.items()):
                lines.append(
                    f'kafka_network_requestmetrics_errors_total{{request="{metrics.name}",error="{_error_name(code)}"}} {count}'
                )
        family(
            "kafka_network_requestmetrics_totaltimems",
            "histogram",
            "Time from a request's arrival to its answer's write, in ms (RequestMetrics TotalTimeMs).",
        )
        for metrics in requests:
            histogram = metrics.total
            label = f'request="{metrics.name}"'
            cumulative = 0
            for bound, count in zip(REQUEST_TIME_BUCKETS_MS, histogram.bucket_counts, strict=False):
                cumulative += count
                lines.append(
                    f'kafka_network_requestmetrics_totaltimems_bucket{{{label},le="{bound}"}} {cumulative}'
                )
            lines.append(
                f'kafka_network_requestmetrics_totaltimems_bucket{{{label},le="+Inf"}} {histogram.count}'
            )
            lines.append(
                f"kafka_network_requestmetrics_totaltimems_sum{{{label}}} {histogram.total_s * 1000:.6f}"
            )
            lines.append(f"kafka_network_requestmetrics_totaltimems_count{{{label}}} {histogram.count}")
        for suffix, attribute, meaning in (
            (
                "requestqueuetimems",
                "queue_s",
                "waiting behind the connection's earlier requests (RequestQueueTimeMs)",
            ),
            ("localtimems", "local_s", "handling, less remote (LocalTimeMs)"),
            (
                "remotetimems",
                "remote_s",
                "parked: a long poll, a join or sync, a commit's write (RemoteTimeMs)",
            ),
            ("responsequeuetimems", "response_queue_s", "from the answer to its write (ResponseQueueTimeMs)"),
            ("responsesendtimems", "send_s", "writing the answer to the socket (ResponseSendTimeMs)"),
        ):
            name = f"kafka_network_requestmetrics_{suffix}"
            family(name, "summary", f"Time of requests spent {meaning}, in ms; _sum / _count is the mean.")
            for metrics in requests:
                label = f'request="{metrics.name}"'
                lines.append(f"{name}_sum{{{label}}} {getattr(metrics, attribute) * 1000:.6f}")
                lines.append(f"{name}_count{{{label}}} {metrics.total.count}")

    def _render_topics(
        self, lines: list[str], family: Callable[[str, str, str], None], state: BrokerState
    ) -> None:
        # Topics deleted since the last scrape are forgotten (their counters end with them).
        for name in [name for name in self.topics if state.logs.topic(name) is None]:
            del self.topics[name]
        rows: list[tuple[str, TopicCounters]] = sorted(self.topics.items())
        if any(getattr(self.other_topics, field) for field in TopicCounters.__slots__):
            rows.append((OTHER_TOPICS_LABEL, self.other_topics))
        for metric, field, help_text in (
            ("bytesin", "bytes_in", "Record bytes appended, by topic (BrokerTopicMetrics BytesInPerSec)."),
            (
                "messagesin",
                "messages_in",
                "Records appended, by topic (BrokerTopicMetrics MessagesInPerSec).",
            ),
            (
                "bytesout",
                "bytes_out",
                "Record bytes sent to fetchers, by topic (BrokerTopicMetrics BytesOutPerSec).",
            ),
            (
                "messagesout",
                "messages_out",
                "Records sent to fetchers, by topic (whole batches; strom's own).",
            ),
            (
                "totalproducerequests",
                "produce_requests",
                "Partitions produced to, by topic (BrokerTopicMetrics TotalProduceRequestsPerSec).",
            ),
            (
                "failedproducerequests",
                "failed_produce_requests",
                "Partitions whose produce failed, by topic (BrokerTopicMetrics FailedProduceRequestsPerSec).",
            ),
            (
                "totalfetchrequests",
                "fetch_requests",
                "Partitions fetched from, by topic (BrokerTopicMetrics TotalFetchRequestsPerSec).",
            ),
            (
                "failedfetchrequests",
                "failed_fetch_requests",
                "Partitions whose fetch failed, by topic (BrokerTopicMetrics FailedFetchRequestsPerSec).",
            ),
        ):
            name = f"kafka_server_brokertopicmetrics_{metric}_total"
            family(name, "counter", help_text)
            lines.extend(
                f'{name}{{topic="{_escape(topic)}"}} {getattr(counters, field)}' for topic, counters in rows
            )

    def _render_logs(
        self, lines: list[str], family: Callable[[str, str, str], None], state: BrokerState
    ) -> None:
        logs = sorted(state.logs.logs(), key=lambda item: (item.topic, item.partition))
        by_topic: dict[str, list[Any]] = {}
        for partition_log in logs:
            by_topic.setdefault(partition_log.topic, []).append(partition_log)
        # Whole topics get a series per partition while the bound allows; internal topics and the
        # topics past the bound get one series for all their partitions (sizes summed).
        individual: list[Any] = []
        summarised: list[tuple[str, int]] = []
        budget = limits.metrics_partitions_max
        for topic_name, partitions in by_topic.items():
            metadata = state.logs.topic(topic_name)
            internal = metadata is not None and metadata.internal
            if not internal and len(partitions) <= budget:
                individual.extend(partitions)
                budget -= len(partitions)
            else:
                if not internal:
                    budget = 0  # once a topic does not fit, no later one does
                summarised.append((topic_name, sum(item.size_bytes for item in partitions)))
        labels = [f'topic="{_escape(item.topic)}",partition="{item.partition}"' for item in individual]
        family(
            "kafka_log_log_size",
            "gauge",
            f'Bytes on disk of each partition\'s log (Log Size); partition="{ALL_PARTITIONS_LABEL}" sums a'
            " topic's partitions (internal topics, and topics past the series bound).",
        )
        lines.extend(
            f"kafka_log_log_size{{{label}}} {item.size_bytes}" for label, item in zip(labels, individual)
        )
        lines.extend(
            f'kafka_log_log_size{{topic="{_escape(topic)}",partition="{ALL_PARTITIONS_LABEL}"}} {size}'
            for topic, size in summarised
        )
        family(
            "kafka_log_log_logendoffset",
            "gauge",
            "Next offset to be written, per partition (Log LogEndOffset).",
        )
        lines.extend(
            f"kafka_log_log_logendoffset{{{label}}} {item.log_end_offset}"
            for label, item in zip(labels, individual)
        )
        family(
            "kafka_log_log_logstartoffset", "gauge", "First offset kept, per partition (Log LogStartOffset)."
        )
        lines.extend(
            f"kafka_log_log_logstartoffset{{{label}}} {item.log_start_offset}"
            for label, item in zip(labels, individual)
        )
        flushes = self.flushes
        family(
            "kafka_log_logflushstats_logflushrateandtimems",
            "histogram",
            "Log flushes (fsync) and their time in ms (LogFlushStats LogFlushRateAndTimeMs).",
        )
        cumulative = 0
        for bound, count in zip(FLUSH_TIME_BUCKETS_MS, flushes.bucket_counts, strict=False):
            cumulative += count
            lines.append(f'kafka_log_logflushstats_logflushrateandtimems_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'kafka_log_logflushstats_logflushrateandtimems_bucket{{le="+Inf"}} {flushes.count}')
        lines.append(f"kafka_log_logflushstats_logflushrateandtimems_sum {flushes.total_s * 1000:.6f}")
        lines.append(f"kafka_log_logflushstats_logflushrateandtimems_count {flushes.count}")

    def _render_replication(
        self, lines: list[str], family: Callable[[str, str, str], None], state: BrokerState
    ) -> None:
        gauges = self.replication(state)
        for name, kind, value, help_text in (
            (
                "kafka_server_replicamanager_partitioncount",
                "gauge",
                gauges.partitions,
                "Partitions this broker holds a replica of (ReplicaManager PartitionCount).",
            ),
            (
                "kafka_server_replicamanager_leadercount",
                "gauge",
                gauges.leaders,
                "Partitions this broker leads (ReplicaManager LeaderCount).",
            ),
            (
                "kafka_server_replicamanager_underreplicatedpartitions",
                "gauge",
                gauges.under_replicated,
                "Partitions led here with fewer in-sync replicas than replicas.",
            ),
            (
                "kafka_server_replicamanager_underminisrpartitioncount",
                "gauge",
                gauges.under_min_isr,
                "Partitions led here with fewer in-sync replicas than min.insync.replicas.",
            ),
            (
                "kafka_server_replicamanager_atminisrpartitioncount",
                "gauge",
                gauges.at_min_isr,
                "Partitions led here with exactly min.insync.replicas in-sync replicas.",
            ),
            (
                "kafka_server_replicamanager_isrshrinks_total",
                "counter",
                gauges.isr_shrinks,
                "ISR shrinks of partitions led here (ReplicaManager IsrShrinksPerSec).",
            ),
            (
                "kafka_server_replicamanager_isrexpands_total",
                "counter",
                gauges.isr_expands,
                "ISR expansions of partitions led here (ReplicaManager IsrExpandsPerSec).",
            ),
            (
                "kafka_controller_kafkacontroller_activecontrollercount",
                "gauge",
                gauges.active_controller,
                "1 on the active controller, else 0.",
            ),
            (
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "gauge",
                gauges.offline_partitions,
                "Partitions without a live leader (reported by the active controller).",
            ),
            (
                "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                "gauge",
                gauges.preferred_replica_imbalance,
                "Partitions not led by their preferred (first) replica (reported by the active controller).",
            ),
            (
                "kafka_controller_kafkacontroller_globaltopiccount",
                "gauge",
                gauges.global_topics,
                "Topics in the cluster (reported by the active controller).",
            ),
            (
                "kafka_controller_kafkacontroller_globalpartitioncount",
                "gauge",
                gauges.global_partitions,
                "Partitions in the cluster (reported by the active controller).",
            ),
            (
                "kafka_controller_controllerstats_uncleanleaderelections_total",
                "counter",
                gauges.unclean_leader_elections,
                "Unclean leader elections this broker made as controller (UncleanLeaderElectionsPerSec).",
            ),
        ):
            family(name, kind, help_text)
            lines.append(f"{name} {value}")
        family(
            "kafka_server_replicafetchermanager_maxlag",
            "gauge",
            "Records the furthest-behind partition this broker follows lacks below its leader's high"
            " watermark (ReplicaFetcherManager MaxLag).",
        )
        lines.append(
            f'kafka_server_replicafetchermanager_maxlag{{clientId="Replica"}} {gauges.replica_max_lag}'
        )

    def _render_groups(
        self, lines: list[str], family: Callable[[str, str, str], None], state: BrokerState
    ) -> None:
        coordinator = state.groups.coordinator
        states = coordinator.group_states()
        by_state: dict[str, int] = defaultdict(int)
        members_total = 0
        members: list[tuple[str, int]] = []
        offsets: list[tuple[str, str, int, int, int]] = []  # group, topic, partition, committed, lag
        budget = limits.metrics_group_partitions_max
        summarised: dict[tuple[str, str], tuple[int, int]] = {}  # (group, topic) -> (partitions, lag)
        for group_id, group_state in states.items():
            by_state[group_state] += 1
            group = coordinator.group(group_id)
            if group is None:
                continue
            # A consumer-protocol group keeps its members apart (classic members inside one too).
            member_count = (
                len(group.consumer.members)
                if group.consumer is not None and group.is_consumer_group
                else len(group.members)
            )
            members_total += member_count
            members.append((group_id, member_count))
            committed = sorted(group.offsets.items())
            fits = len(committed) <= budget  # once a group does not fit, no later one does
            budget = budget - len(committed) if fits else 0
            for (topic, partition), offset in committed:
                partition_log = state.logs.log(topic, partition)
                if partition_log is None:
                    continue  # the topic was deleted; its committed offset means nothing now
                lag = max(partition_log.high_watermark - offset.offset, 0)
                if fits:
                    offsets.append((group_id, topic, partition, offset.offset, lag))
                else:
                    count, total = summarised.get((group_id, topic), (0, 0))
                    summarised[(group_id, topic)] = (count + 1, total + lag)
        family(
            "kafka_consumergroup_current_offset",
            "gauge",
            "Committed offset of each group on each partition (as kafka_exporter names it).",
        )
        rows = [
            (
                f'consumergroup="{_escape(group)}",topic="{_escape(topic)}",partition="{partition}"',
                committed,
                lag,
            )
            for group, topic, partition, committed, lag in offsets
        ]
        lines.extend(
            f"kafka_consumergroup_current_offset{{{label}}} {committed}" for label, committed, _ in rows
        )
        family(
            "kafka_consumergroup_lag",
            "gauge",
            "High watermark minus committed offset, per group and partition; partition="
            f'"{ALL_PARTITIONS_LABEL}" sums a topic\'s partitions for groups past the series bound.',
        )
        lines.extend(f"kafka_consumergroup_lag{{{label}}} {lag}" for label, _, lag in rows)
        lines.extend(
            f'kafka_consumergroup_lag{{consumergroup="{_escape(group)}",topic="{_escape(topic)}",'
            f'partition="{ALL_PARTITIONS_LABEL}"}} {lag}'
            for (group, topic), (_, lag) in sorted(summarised.items())
        )
        family("kafka_consumergroup_members", "gauge", "Members of each consumer group.")
        lines.extend(
            f'kafka_consumergroup_members{{consumergroup="{_escape(group)}"}} {count}'
            for group, count in members
        )
        family("strom_groups", "gauge", "Consumer groups by state.")
        for group_state in GROUP_STATES:
            lines.append(f'strom_groups{{state="{group_state}"}} {by_state.get(group_state, 0)}')
        family("strom_group_members", "gauge", "Members of all consumer groups.")
        lines.append(f"strom_group_members {members_total}")
        family("strom_rebalances_total", "counter", "Rebalances started.")
        lines.append(f"strom_rebalances_total {coordinator.rebalances_total}")
        history = coordinator.history
        family(
            "strom_rebalances_recorded_total",
            "counter",
            "Rebalances finished (completed or superseded) by trigger, as the rebalance history records them.",
        )
        for trigger in Trigger:
            count = history.finished_by_trigger.get(trigger.value, 0)
            lines.append(f'strom_rebalances_recorded_total{{trigger="{trigger.value}"}} {count}')
        family(
            "strom_rebalance_duration_ms",
            "histogram",
            "Time from a rebalance's start to its end (classic: Stable; consumer protocol: every member reconciled).",
        )
        cumulative = 0
        for bound, count in zip(DURATION_BUCKETS_MS, history.duration_bucket_counts, strict=False):
            cumulative += count
            lines.append(f'strom_rebalance_duration_ms_bucket{{le="{bound}"}} {cumulative}')
        total = sum(history.duration_bucket_counts)
        lines.append(f'strom_rebalance_duration_ms_bucket{{le="+Inf"}} {total}')
        lines.append(f"strom_rebalance_duration_ms_sum {history.duration_sum_ms}")
        lines.append(f"strom_rebalance_duration_ms_count {total}")

    def _render_process(self, lines: list[str], family: Callable[[str, str, str], None]) -> None:
        times = os.times()
        family(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the broker process, in seconds.",
        )
        lines.append(f"process_cpu_seconds_total {times.user + times.system:.2f}")
        resident, virtual = _memory_bytes()
        if resident is not None:
            family(
                "process_resident_memory_bytes", "gauge", "Resident memory of the broker process, in bytes."
            )
            lines.append(f"process_resident_memory_bytes {resident}")
        if virtual is not None:
            family("process_virtual_memory_bytes", "gauge", "Virtual memory of the broker process, in bytes.")
            lines.append(f"process_virtual_memory_bytes {virtual}")
        open_fds = _open_fds()
        if open_fds is not None:
            family("process_open_fds", "gauge", "File descriptors the broker process has open.")
            lines.append(f"process_open_fds {open_fds}")
        family("process_max_fds", "gauge", "The broker process's limit on open file descriptors.")
        lines.append(f"process_max_fds {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
        family("process_start_time_seconds", "gauge", "When the broker started, in seconds since the epoch.")
        lines.append(f"process_start_time_seconds {self.started_wall_s:.3f}")

    def _render_connections(self, lines: list[str], family: Callable[[str, str, str], None]) -> None:
        family("strom_bytes_in_total", "counter", "Bytes received on client connections.")
        lines.append(f"strom_bytes_in_total {self.bytes_in_total}")
        family("strom_bytes_out_total", "counter", "Bytes of answers written to client connections.")
        lines.append(f"strom_bytes_out_total {self.bytes_out_total}")
        family("strom_connections", "gauge", "Client connections open now.")
        lines.append(f"strom_connections {self.connections_open}")
        family("strom_connections_accepted_total", "counter", "Client connections accepted.")
        lines.append(f"strom_connections_accepted_total {self.connections_total}")
        family(
            "strom_connections_closed_total",
            "counter",
            "Connections the broker closed because they were idle, sent a request too slowly or failed"
            " their TLS handshake.",
        )
        for reason in ("idle", "slow_request", "tls_handshake_failed"):
            lines.append(
                f'strom_connections_closed_total{{reason="{reason}"}} {self.connections_closed_total[reason]}'
            )
        budget = self.connection_budget
        if budget is not None:
            family(
                "strom_connections_muted",
                "gauge",
                "Connections not read now because their unsent answers are over their budget.",
            )
            lines.append(f"strom_connections_muted {budget.muted}")
            family(
                "strom_connection_held_bytes",
                "gauge",
                "Unsent answers and unanswered request bytes of all connections (as last looked at).",
            )
            lines.append(f"strom_connection_held_bytes {budget.held_bytes}")


def _memory_bytes() -> tuple[int | None, int | None]:
    """(resident, virtual) bytes of this process, from /proc (None where it is not readable)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        page_bytes = os.sysconf("SC_PAGE_SIZE")
        return int(fields[1]) * page_bytes, int(fields[0]) * page_bytes
    except (OSError, ValueError, IndexError):
        return None, None


def _open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


class MetricsServer:
    """A minimal HTTP/1.0 server: ``GET /metrics`` answers the page, anything else 404."""

    def __init__(self, metrics: BrokerMetrics, state: BrokerState, host: str, port: int) -> None:
        self._metrics = metrics
        self._state = state
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("metrics on http://%s:%d/metrics", self._host or "0.0.0.0", self.port)

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        request_line = head[:HTTP_REQUEST_BYTES_MAX].split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
            body = self._metrics.render(self._state).encode()
            status = "200 OK"
            content_type = "text/plain; version=0.0.4; charset=utf-8"
        else:
            body = b"not found: the metrics are at /metrics\n"
            status = "404 Not Found"
            content_type = "text/plain; charset=utf-8"
        writer.write(
            f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
