"""confluent-kafka (librdkafka): create a topic, produce 10,000 keyed records with headers under each
codec, read them back byte for byte, in order, with contiguous offsets."""

from __future__ import annotations

import pytest

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    CODECS,
    assert_round_trip,
    confluent_produce,
    confluent_producer,
    confluent_read_all,
    create_topic,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.compat

RECORDS = make_records()


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(shared_broker: BrokerProcess, codec: str, partitions: int) -> None:
    topic = unique_topic(f"confluent-{codec}")
    create_topic(shared_broker.bootstrap, topic, partitions)
    producer = confluent_producer(shared_broker.bootstrap, compression_type=codec)
    sent = confluent_produce(producer, topic, RECORDS)
    assert {record.partition for record in sent} == set(range(partitions))
    read = confluent_read_all(shared_broker.bootstrap, topic, partitions)
    assert_round_trip(sent, read)
