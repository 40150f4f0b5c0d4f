"""kcat: produce 10,000 keyed records with headers from stdin under each codec (``-z``), read them
back with ``kcat -C -e -J``. kcat cannot create topics: confluent-kafka's admin client does.

kcat's ``-H`` gives every record of a run the same headers, and its line-oriented input keeps to text,
so the records here are printable (the other clients cover binary keys, values and headers)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict

import pytest

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    CODECS,
    CONSUME_TIMEOUT_S,
    DELIVERY_TIMEOUT_S,
    ReadRecord,
    SentRecord,
    assert_round_trip,
    create_topic,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.compat

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
RECORDS = make_records(seed=31, binary=False)
COMMON_OPTIONS = ["-X", "broker.address.family=v4", "-q"]


def _produce(bootstrap: str, topic: str, codec: str) -> None:
    lines = b"".join(b"%s\t%s\n" % (record.key or b"", record.value or b"") for record in RECORDS)
    header_options = []
    for name, value in RECORDS[0].headers:  # the same headers on every record, as -H gives them
        header_options += ["-H", f"{name}={(value or b'').decode()}"]
    command = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-K", "\t", *header_options, *COMMON_OPTIONS]
    command += ["-X", "linger.ms=20", "-X", "batch.num.messages=10000", "-X", "acks=all"]
    if codec != "none":
        command += ["-z", codec]
    completed = subprocess.run(
        command, input=lines, capture_output=True, timeout=DELIVERY_TIMEOUT_S, check=False
    )
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")


def _read_all(bootstrap: str, topic: str) -> list[ReadRecord]:
    command = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", *COMMON_OPTIONS]
    completed = subprocess.run(command, capture_output=True, timeout=CONSUME_TIMEOUT_S, check=False)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")
    read = []
    for line in completed.stdout.decode().splitlines():
        envelope = json.loads(line)
        flat_headers = envelope.get("headers") or []
        headers = [(flat_headers[i], flat_headers[i + 1].encode()) for i in range(0, len(flat_headers), 2)]
        key = envelope["key"]
        payload = envelope["payload"]
        read.append(
            ReadRecord(
                envelope["partition"],
                envelope["offset"],
                None if key is None else key.encode(),
                None if payload is None else payload.encode(),
                headers,
            )
        )
    read.sort(key=lambda record: (record.partition, record.offset))
    return read


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(shared_broker: BrokerProcess, codec: str, partitions: int) -> None:
    topic = unique_topic(f"kcat-{codec}")
    create_topic(shared_broker.bootstrap, topic, partitions)
    _produce(shared_broker.bootstrap, topic, codec)
    read = _read_all(shared_broker.bootstrap, topic)
    # kcat reports no offsets on produce: place each sent record where it was read (values are
    # unique), then check order, contiguity and content as for the other clients.
    partition_of_value = {record.value: record.partition for record in read}
    sent = [
        SentRecord(
            record.sequence,
            record.key,
            record.value,
            record.headers,
            partition_of_value.get(record.value, -2),
        )
        for record in RECORDS
    ]
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    for record in sent:
        partitions_of_key[record.key].add(record.partition)
    assert all(len(found) == 1 for found in partitions_of_key.values()), "one key landed in two partitions"
    assert_round_trip(sent, read)
