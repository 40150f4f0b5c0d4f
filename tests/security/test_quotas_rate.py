"""The long quota test (issue 13): a confluent-kafka producer limited to 1 MiB/s by a
``producer_byte_rate`` quota achieves 1 MiB/s ± 10 % over 30 s, told so by ``throttle_cb``, while a
producer with another client id beside it is unaffected. The broker runs Kafka's default window
(11 samples of 1 s). As in Kafka, a new client's rate is taken over at least ten samples, so ten
seconds' worth of its allowance goes at once before it is held back; the 30 s are measured after
that first window (``WARM_UP_S``), when the rate is what the quota holds it to."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.compat.conftest import StartBroker
from tests.security.quota_support import admin_for, create_topic

pytestmark = [pytest.mark.compat, pytest.mark.slow]

QUOTA_BYTES_PER_S = 1_048_576
LIMITED_OFFER_BYTES_PER_S = 3 * QUOTA_BYTES_PER_S  # the limited producer tries to send 3x its quota
FREE_OFFER_BYTES_PER_S = 2 * QUOTA_BYTES_PER_S  # the other one sends 2x that quota, paced by itself
RUN_S = 30.0
WARM_UP_S = 11.0  # one whole window: the first-window allowance is spent and has expired
RECORD_BYTES = 10_000
TICK_S = 0.01


class PacedProducer:
    """A confluent-kafka producer offering ``offer_bytes_per_s``; counts what was acknowledged by
    ``until`` (monotonic) and the throttle times it was told."""

    def __init__(self, bootstrap: str, client_id: str, offer_bytes_per_s: int) -> None:
        self.offer_bytes_per_s = offer_bytes_per_s
        self.acknowledged_bytes = 0
        self.failed = 0
        self.throttles_ms: list[int] = []
        self.since = 0.0
        self.until = float("inf")
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "broker.address.family": "v4",
                "client.id": client_id,
                "linger.ms": 5,
                "acks": 1,
                "throttle_cb": lambda event: self.throttles_ms.append(int(event.throttle_time * 1000)),
            }
        )

    def _delivered(self, error: Any, message: Any) -> None:
        now = time.monotonic()
        if now > self.until:
            return  # after the run, and what was purged at its end
        if error is not None:
            self.failed += 1
        elif now >= self.since:
            self.acknowledged_bytes += len(message.value())

    def run(self, topic: str, started: float, stop: threading.Event) -> None:
        value = b"v" * RECORD_BYTES
        offered = 0
        while not stop.is_set():
            owed = (time.monotonic() - started) * self.offer_bytes_per_s
            while offered + RECORD_BYTES <= owed:
                self.producer.produce(topic, value=value, on_delivery=self._delivered)
                offered += RECORD_BYTES
            self.producer.poll(TICK_S)
        self.producer.poll(0.5)
        self.producer.purge()
        self.producer.flush(10)
        self.producer.close()  # not left connecting to a broker the test stops


def test_a_producer_limited_to_1_mib_per_s_gets_it_and_its_neighbour_is_unaffected(
    start_broker: StartBroker,
) -> None:
    broker = start_broker()
    topic = "quota-rate"
    create_topic(broker, topic, partitions=2)
    with admin_for(broker) as admin:
        admin.alter_client_quotas(
            {(("client-id", "limited"),): {"producer_byte_rate": float(QUOTA_BYTES_PER_S)}}
        )
    limited = PacedProducer(broker.bootstrap, "limited", LIMITED_OFFER_BYTES_PER_S)
    free = PacedProducer(broker.bootstrap, "free", FREE_OFFER_BYTES_PER_S)
    stop = threading.Event()
    started = time.monotonic()
    limited.since = free.since = started + WARM_UP_S
    limited.until = free.until = started + WARM_UP_S + RUN_S
    threads = [threading.Thread(target=each.run, args=(topic, started, stop)) for each in (limited, free)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(WARM_UP_S + RUN_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    limited_rate = limited.acknowledged_bytes / RUN_S
    free_rate = free.acknowledged_bytes / RUN_S
    summary = f"limited {limited_rate / QUOTA_BYTES_PER_S:.3f} MiB/s, free {free_rate / QUOTA_BYTES_PER_S:.3f} MiB/s"
    print(summary)
    assert 0.9 * QUOTA_BYTES_PER_S <= limited_rate <= 1.1 * QUOTA_BYTES_PER_S, summary
    assert limited.throttles_ms and max(limited.throttles_ms) > 0, "throttle_cb was never called"
    # The neighbour got what it offered (within 10 %) and was never throttled.
    assert free_rate >= 0.9 * FREE_OFFER_BYTES_PER_S, summary
    assert not [throttle for throttle in free.throttles_ms if throttle > 0]
    assert limited.failed == free.failed == 0  # throttled, never refused
