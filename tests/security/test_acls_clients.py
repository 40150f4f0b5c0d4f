"""ACLs against a real broker with real clients: a principal (User:ANONYMOUS, see acl_support)
holding some ACLs and lacking others gets Kafka's authorization errors from confluent-kafka and
kafka-python for produce, fetch, metadata, groups, commits and topic creation; prefixed ACLs apply;
a DENY beats an ALLOW; a listing of every topic leaves out the ones it may not describe, and a
topic it may not describe is refused alike whether it exists or not."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic

from tests.compat.conftest import BrokerProcess
from tests.compat.wire import WireClient
from tests.security.acl_support import Acl, admin, start_authorizing_broker

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

TIMEOUT_S = 20.0
# What the principal may do: everything on topics and groups starting "ok-" (prefixed), except
# writing to "ok-denied" (a DENY beats the prefixed ALLOW); reading "read-only"; nothing on
# "secret" and "secret-2", which exist.
ACLS = [
    Acl("topic", "ok-", "all", pattern="prefixed"),
    Acl("group", "ok-", "all", pattern="prefixed"),
    Acl("topic", "ok-denied", "write", permission="deny"),
    Acl("topic", "read-only", "read"),
    Acl("transactional_id", "ok-", "all", pattern="prefixed"),
]
TOPICS = ["ok-a", "ok-denied", "read-only", "secret", "secret-2"]


HIDDEN_GROUP = "secret-group"


def _make_hidden_group(broker: BrokerProcess) -> None:
    """While the principal is still a super user: a group it will not be allowed to describe."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": HIDDEN_GROUP})
    try:
        consumer.commit(offsets=[ConfluentTopicPartition("secret", 0, 0)], asynchronous=False)
        (committed,) = consumer.committed([ConfluentTopicPartition("secret", 0)], timeout=TIMEOUT_S)
        assert committed.offset == 0  # the group exists: the listing below has something to hide
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    started = start_authorizing_broker(
        Path(tmp_path_factory.mktemp("acl-broker")),
        ACLS,
        TOPICS,
        prepare=_make_hidden_group,
        **{"auto.create.topics.enable": "true"},
    )
    try:
        yield started
    finally:
        started.close()


def _produce_one(bootstrap: str, topic: str, **config: object) -> KafkaError | None:
    """Produce one record with confluent-kafka; the delivery error (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **config})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"value", callback=lambda error, _message: outcome.append(error))
    producer.flush(TIMEOUT_S)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def test_produce_needs_write(broker: BrokerProcess) -> None:
    assert _produce_one(broker.bootstrap, "ok-a") is None
    # An idempotent producer's InitProducerId: WRITE on some topic stands for IDEMPOTENT_WRITE.
    assert _produce_one(broker.bootstrap, "ok-a", **{"enable.idempotence": True}) is None
    for topic in ("secret", "read-only"):
        error = _produce_one(broker.bootstrap, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, error)


def test_deny_beats_a_prefixed_allow(broker: BrokerProcess) -> None:
    error = _produce_one(broker.bootstrap, "ok-denied")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_python_produce_refused(broker: BrokerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        assert producer.send("ok-a", b"v").get(timeout=TIMEOUT_S).topic == "ok-a"
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("secret", b"v").get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def test_metadata_of_every_topic_leaves_out_undescribable_ones(broker: BrokerProcess) -> None:
    listed = admin(broker).list_topics(timeout=TIMEOUT_S)
    # ok-denied stays describable: ALL allows DESCRIBE, and the DENY is of WRITE only.
    assert set(listed.topics) >= {"ok-a", "ok-denied", "read-only"}
    assert not set(listed.topics) & {"secret", "secret-2"}


def test_metadata_by_name_does_not_tell_whether_a_topic_exists(broker: BrokerProcess) -> None:
    client = admin(broker)
    for topic in ("secret", "secret-that-does-not-exist"):
        described = client.list_topics(topic=topic, timeout=TIMEOUT_S).topics[topic]
        assert described.error is not None, topic
        assert described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, described.error)
    assert "secret-that-does-not-exist" not in client.list_topics(timeout=TIMEOUT_S).topics


def test_auto_create_needs_create(broker: BrokerProcess) -> None:
    client = admin(broker)
    created = f"ok-auto-{uuid.uuid4().hex[:8]}"
    assert _produce_one(broker.bootstrap, created) is None  # CREATE on "ok-" (ALL) lets it be made
    assert created in client.list_topics(timeout=TIMEOUT_S).topics


def test_create_topics_needs_create(broker: BrokerProcess) -> None:
    client = admin(broker)
    futures = client.create_topics(
        [NewTopic("ok-made", 1, 1), NewTopic("elsewhere", 1, 1)], request_timeout=TIMEOUT_S
    )
    futures["ok-made"].result(timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as refused:
        futures["elsewhere"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_delete_topics_needs_delete(broker: BrokerProcess) -> None:
    client = admin(broker)
    futures = client.delete_topics(["secret-2"], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as refused:
        futures["secret-2"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _consume_error(bootstrap: str, topic: str, group: str) -> KafkaError | None:
    """Subscribe with confluent-kafka and poll until a message or an error; the error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(int(TIMEOUT_S)):
            message = consumer.poll(1.0)
            if message is None:
                continue
            return message.error()
        raise AssertionError(f"nothing from {topic} in {TIMEOUT_S} s")
    finally:
        consumer.close()


def test_consumer_group_needs_read_on_the_group(broker: BrokerProcess) -> None:
    assert _produce_one(broker.bootstrap, "ok-a") is None
    error = _consume_error(broker.bootstrap, "ok-a", "not-my-group")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error


def test_consumer_needs_read_on_the_topic(broker: BrokerProcess) -> None:
    assert _consume_error(broker.bootstrap, "ok-a", "ok-group-1") is None
    # A topic it may not describe: librdkafka reports the subscription's topic as not authorized.
    error = _consume_error(broker.bootstrap, "secret", "ok-group-2")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error


def test_fetch_needs_read(broker: BrokerProcess) -> None:
    """kafka-python reads "read-only" (READ); a Fetch for "secret" is answered
    TOPIC_AUTHORIZATION_FAILED (kafka-python never sends it: its metadata already said the topic
    is not authorized, so the raw request is sent here), and so is one for a topic that does
    not exist."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        consumer.assign([TopicPartition("read-only", 0)])
        assert consumer.poll(timeout_ms=1000) == {}
        assert consumer.position(TopicPartition("read-only", 0)) == 0
    finally:
        consumer.close()
    from strom.protocol.messages.fetch import FetchRequest, FetchResponse

    def fetch_errors(topic: str) -> list[int]:
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                    ],
                )
            ],
        )
        with WireClient(broker.port) as client:
            response = client.round_trip(request, FetchResponse, 11)
        return [partition.error_code for answer in response.responses for partition in answer.partitions]

    assert fetch_errors("read-only") == [0]
    assert fetch_errors("secret") == [29]  # TOPIC_AUTHORIZATION_FAILED
    assert fetch_errors("secret-not-there") == [29]


def test_commits_need_read_on_group_and_topic(broker: BrokerProcess) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id="ok-committer", enable_auto_commit=False
    )
    try:
        consumer.commit({TopicPartition("ok-a", 0): OffsetAndMetadata(0, "", -1)})
        assert consumer.committed(TopicPartition("ok-a", 0)) == 0
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.commit({TopicPartition("secret", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()
    other = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id="their-group", enable_auto_commit=False
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            other.commit({TopicPartition("ok-a", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        other.close()


def test_acls_cannot_be_changed_without_alter_on_the_cluster(broker: BrokerProcess) -> None:
    from strom.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse

    with WireClient(broker.port) as client:
        response = client.round_trip(
            CreateAclsRequest(
                creations=[
                    CreateAclsRequest.AclCreation(
                        resource_type=2,
                        resource_name="secret",
                        resource_pattern_type=3,
                        principal="User:ANONYMOUS",
                        host="*",
                        operation=3,
                        permission_type=3,
                    )
                ]
            ),
            CreateAclsResponse,
            3,
        )
    assert [result.error_code for result in response.results] == [31]  # CLUSTER_AUTHORIZATION_FAILED


def test_authorized_operations_come_from_the_acls(broker: BrokerProcess) -> None:
    from strom.protocol.acl import AclOperation, operations_bit_field
    from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name) for name in ("read-only", "ok-a")],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    with WireClient(broker.port) as client:
        response = client.round_trip(request, MetadataResponse, 8)
    operations = {topic.name: topic.topic_authorized_operations for topic in response.topics}
    assert operations["read-only"] == operations_bit_field([AclOperation.READ, AclOperation.DESCRIBE])
    everything_on_a_topic = operations_bit_field(
        [
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        ]
    )
    assert operations["ok-a"] == everything_on_a_topic
    assert response.cluster_authorized_operations == 0  # no ACL on the cluster


def test_group_listing_leaves_out_groups_it_may_not_describe(broker: BrokerProcess) -> None:
    from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
    from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id="ok-listed", enable_auto_commit=False
    )
    try:
        consumer.commit({TopicPartition("ok-a", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()
    with WireClient(broker.port) as client:
        listed = client.round_trip(ListGroupsRequest(), ListGroupsResponse, 4)
        described = client.round_trip(
            DescribeGroupsRequest(groups=[HIDDEN_GROUP, "ok-listed"]), DescribeGroupsResponse, 5
        )
    names = {group.group_id for group in listed.groups}
    assert "ok-listed" in names and HIDDEN_GROUP not in names
    errors = {group.group_id: group.error_code for group in described.groups}
    assert errors == {HIDDEN_GROUP: 30, "ok-listed": 0}  # GROUP_AUTHORIZATION_FAILED


def test_transactions_need_write_on_the_transactional_id(broker: BrokerProcess) -> None:
    allowed = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ok-tx"})
    allowed.init_transactions(TIMEOUT_S)
    allowed.begin_transaction()
    allowed.produce("ok-a", b"in a transaction")
    allowed.commit_transaction(TIMEOUT_S)
    refused = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "not-mine"})
    # Caught by hand, not with pytest.raises: an ExceptionInfo kept in this frame would tie the
    # frame (and both producers) into a cycle, and they would go on reconnecting to the stopped
    # broker until a garbage collection.
    try:
        refused.init_transactions(TIMEOUT_S)
    except KafkaException as error:
        code = error.args[0].code()
    else:
        pytest.fail("init_transactions of a transactional id without WRITE was not refused")
    assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
