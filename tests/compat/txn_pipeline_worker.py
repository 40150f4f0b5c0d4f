"""A consume-transform-produce worker (confluent-kafka), run as a subprocess by
``test_transactions.py`` and killed with ``kill -9`` at random points.

It reads the input topic as a member of a consumer group (static membership, so a restarted worker
takes its predecessor's place at once), and for every batch it read writes one output record per
input record (key ``partition:offset`` of the input record, the value unchanged, the same partition)
and the group's new offsets in one transaction (``send_offsets_to_transaction``). It starts with
``init_transactions``, which fences its killed predecessor and aborts whatever transaction that one
left open, and resumes from the group's committed offsets. It prints ``committed <records>`` after
each commit and exits 0 with ``done`` once the group's committed offsets reach the given ends.
Given COMMITS_MAX (> 0), it stops after that many commits (``paused``) and waits to be killed: a
run that is to be killed can then never reach the ends first, however the test's timing goes.

    python -m tests.compat.txn_pipeline_worker BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID END,END,... [COMMITS_MAX]
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

BATCH_RECORDS_MAX = 20
TIMEOUT_S = 30.0


def main(argv: list[str]) -> int:
    bootstrap, input_topic, output_topic, group, transactional_id, ends_text = argv[:6]
    commits_max = int(argv[6]) if len(argv) > 6 else 0
    ends = {partition: int(end) for partition, end in enumerate(ends_text.split(","))}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "transactional.id": transactional_id,
            "linger.ms": 2,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "group.instance.id": f"{group}-worker",
            "session.timeout.ms": 6_000,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([input_topic])
    partitions = [TopicPartition(input_topic, partition) for partition in ends]
    committed_records = 0
    commits = 0
    while True:
        messages: list[Any] = consumer.consume(num_messages=BATCH_RECORDS_MAX, timeout=0.2)
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
        if not messages:
            if len(consumer.assignment()) == len(ends) and at_ends(consumer, partitions, ends):
                print("done", flush=True)
                consumer.close()
                return 0
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(
                output_topic,
                key=f"{message.partition()}:{message.offset()}".encode(),
                value=message.value(),
                partition=message.partition(),
            )
        positions = consumer.position(consumer.assignment())
        try:
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if not error.txn_requires_abort():
                raise
            print(f"aborting: {error}", file=sys.stderr, flush=True)
            producer.abort_transaction(TIMEOUT_S)
            for committed in consumer.committed(consumer.assignment(), TIMEOUT_S):
                # Back to what the group committed (the input's first offset, 0, if nothing yet).
                committed.offset = max(committed.offset, 0)
                consumer.seek(committed)
            continue
        committed_records += len(messages)
        commits += 1
        print(f"committed {committed_records}", flush=True)
        if commits == commits_max:
            print("paused", flush=True)
            threading.Event().wait()  # until killed


def at_ends(consumer: Consumer, partitions: list[TopicPartition], ends: dict[int, int]) -> bool:
    committed = consumer.committed(partitions, TIMEOUT_S)
    return all(found.offset >= ends[found.partition] for found in committed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
