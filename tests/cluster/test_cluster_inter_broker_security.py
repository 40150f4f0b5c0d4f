"""Brokers that reach one another over TLS and SASL (``inter.broker.listener.name``,
``security.inter.broker.protocol``), with ACLs on and no PLAINTEXT listener anywhere: three real
brokers on a real ZooKeeper replicate an acks=all topic with every replica in sync, lose their
leader to kill -9 and still serve every record acknowledged; a broker whose inter-broker password
is wrong is refused at start, with a line saying why, and the others go on.

Two clusters: one whose only listener is SSL with client certificates required (each broker shows
its own certificate, whose subject is the super user), one with a SASL_SSL client listener first and
a SASL_SSL BROKER listener where brokers log in with SCRAM-SHA-512 as User:broker (the credential
written to ZooKeeper before any broker starts, as Kafka requires), in sessions of two seconds that
their connections renew.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.base.clock import SystemClock
from strom.cli.dev_cluster import BrokerProcess, LocalCluster
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.kazoo_store import KazooStore
from strom.cluster.zookeeper import ClusterZooKeeper
from strom.security.scram import ScramCredential
from tests.security.certs import Certificates, _signed, make_certificates

from .cluster_support import CLUSTER_SETTINGS, wait_until
from .conftest import _LIVE_CLUSTERS
from .zookeeper_server import ZooKeeperServer

SCRAM = "SCRAM-SHA-512"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
BROKER_SUBJECT = "/O=strom/CN=broker"
BROKER_PRINCIPAL = "User:CN=broker,O=strom"
RECORDS = 200
TOPIC = "replicated"
SECURED = {
    "authorizer.class.name": "strom",
    "allow.everyone.if.no.acl.found": "false",
    "min.insync.replicas": "2",
}


@dataclass(frozen=True)
class SecuredCluster:
    cluster: LocalCluster
    client: dict[str, str]  # a super user's client settings (without bootstrap.servers)
    settings: dict[str, str]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certificates, Path]:
    """The test CA's certificates, and a keystore for the brokers whose certificate serves both
    ends of a connection (serverAuth, clientAuth) and names 127.0.0.1."""
    made = make_certificates(tmp_path_factory.mktemp("certificates"))
    certificate, key = _signed(
        made.directory,
        "inter-broker",
        BROKER_SUBJECT,
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    keystore = made.directory / "inter-broker-keystore.pem"
    keystore.write_text(certificate.read_text() + key.read_text())
    return made, keystore


def _started(
    zookeeper: ZooKeeperServer, work_dir: Path, chroot: str, settings: dict[str, str]
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(work_dir, 3, settings=settings, zookeeper=zookeeper, chroot=chroot)
    _LIVE_CLUSTERS.append(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        _LIVE_CLUSTERS.remove(cluster)
        cluster.stop()


@pytest.fixture(scope="module")
def mtls_cluster(
    zookeeper_server: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    certificates: tuple[Certificates, Path],
) -> Iterator[SecuredCluster]:
    made, keystore = certificates
    settings = (
        CLUSTER_SETTINGS
        | SECURED
        | {
            "listeners": "SSL://127.0.0.1:0",
            "security.inter.broker.protocol": "SSL",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.location": str(made.ca),
            "ssl.client.auth": "required",
            "super.users": f"{BROKER_PRINCIPAL};User:CN=alice,OU=eng,O=strom",
        }
    )
    client = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(made.ca),
        "ssl.certificate.location": str(made.client_certificate),
        "ssl.key.location": str(made.client_key),
    }
    work_dir = tmp_path_factory.mktemp("mtls-cluster")
    for cluster in _started(zookeeper_server, work_dir, "/strom-mtls", settings):
        yield SecuredCluster(cluster, client, settings)


def _jaas(user: str, password: str) -> str:
    return f'{SCRAM_MODULE} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def scram_cluster(
    zookeeper_server: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    certificates: tuple[Certificates, Path],
) -> Iterator[SecuredCluster]:
    made, _ = certificates
    chroot = "/strom-scram-inter-broker"
    store = KazooStore.connect(
        ZooKeeperConnect.parse(zookeeper_server.connect_string + chroot),
        session_timeout_ms=10_000,
        connect_timeout_ms=10_000,
    )
    try:  # what kafka-configs --zookeeper --alter --add-config 'SCRAM-SHA-512=[...]' writes
        zookeeper = ClusterZooKeeper(store, SystemClock())
        zookeeper.ensure_layout()
        for user, password in (("broker", "broker-secret"), ("admin", "admin-secret")):
            credential = ScramCredential.from_password(SCRAM, password)
            zookeeper.update_user_config(user, {SCRAM: credential.to_text()})
    finally:
        store.close()
    settings = (
        CLUSTER_SETTINGS
        | SECURED
        | {
            "listeners": "CLIENT://127.0.0.1:0,BROKER://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,BROKER:SASL_SSL",
            "inter.broker.listener.name": "BROKER",
            "sasl.enabled.mechanisms": SCRAM,
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            "listener.name.broker.scram-sha-512.sasl.jaas.config": _jaas("broker", "broker-secret"),
            "ssl.keystore.location": str(made.broker_keystore),
            "ssl.truststore.location": str(made.ca),
            "super.users": "User:broker;User:admin",
            # Sessions of two seconds: the brokers' connections to one another log in again on the way.
            "connections.max.reauth.ms": "2000",
        }
    )
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": SCRAM,
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
        "ssl.ca.location": str(made.ca),
    }
    work_dir = tmp_path_factory.mktemp("scram-cluster")
    for cluster in _started(zookeeper_server, work_dir, chroot, settings):
        yield SecuredCluster(cluster, client, settings)


# ---- what a client sees ------------------------------------------------------------------------


def _partition(secured: SecuredCluster, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, in-sync replicas) of partition 0, as the brokers running now tell it."""
    admin = AdminClient(
        secured.client | {"bootstrap.servers": secured.cluster.live_bootstrap, "socket.timeout.ms": "5000"}
    )
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return partition.leader, sorted(partition.replicas), sorted(partition.isrs)


def _in_sync(secured: SecuredCluster, topic: str, replicas: int) -> bool:
    leader, assigned, isr = _partition(secured, topic)
    return leader >= 0 and len(assigned) == replicas and isr == assigned


def _produce(secured: SecuredCluster, topic: str, values: list[bytes]) -> None:
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer(secured.client | {"bootstrap.servers": secured.cluster.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(60) == 0, "records still unacknowledged after 60 s"
    assert failures == []


def _consume_all(secured: SecuredCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        secured.client
        | {
            "bootstrap.servers": secured.cluster.live_bootstrap,
            "group.id": "checker",
            "enable.auto.commit": "false",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def _replicate_and_fail_over(secured: SecuredCluster) -> None:
    cluster = secured.cluster
    wait_until(
        lambda: len(AdminClient(secured.client | {"bootstrap.servers": cluster.bootstrap})
                    .list_topics(timeout=10).brokers) == 3,
        "every broker registered",
    )  # fmt: skip
    admin = AdminClient(secured.client | {"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)])[TOPIC].result(30)
    wait_until(lambda: _in_sync(secured, TOPIC, 3), "every replica in sync")

    values = [f"record-{index}".encode() for index in range(RECORDS)]
    _produce(secured, TOPIC, values)  # acks=all with min.insync.replicas=2: the followers fetched
    wait_until(lambda: _in_sync(secured, TOPIC, 3), "every replica in sync after the writes")

    leader, _, _ = _partition(secured, TOPIC)
    cluster.brokers[leader].kill()
    wait_until(lambda: _partition(secured, TOPIC)[0] not in (-1, leader), "a new leader")
    assert _consume_all(secured, TOPIC, RECORDS) == values

    cluster.restart_stopped()  # it catches up over the same secured listener
    wait_until(lambda: _in_sync(secured, TOPIC, 3), "the restarted broker back in sync")


def test_brokers_replicate_over_mutual_tls_as_their_certificates_subject(
    mtls_cluster: SecuredCluster,
) -> None:
    _replicate_and_fail_over(mtls_cluster)


def test_brokers_replicate_over_sasl_ssl_logged_in_with_scram(scram_cluster: SecuredCluster) -> None:
    _replicate_and_fail_over(scram_cluster)
    for broker in scram_cluster.cluster.brokers.values():  # no connection outlived its session
        log_text = broker.log_path.read_text(encoding="utf-8")
        assert "was not re-authenticated" not in log_text
        assert "during SASL authentication" not in log_text


def _refused_at_start(cluster: LocalCluster, settings: dict[str, str], work_dir: Path) -> str:
    """Start a fourth broker with ``settings``: it must exit 1 without registering; its log."""
    intruder = BrokerProcess(
        4, 0, work_dir / "broker-4", work_dir / "broker-4.log", cluster.zookeeper_connect, settings
    )
    intruder.start()
    assert intruder.process is not None
    try:
        exit_code = intruder.process.wait(60)
    finally:
        intruder.kill()
    log_text = (work_dir / "broker-4.log").read_text(encoding="utf-8")
    assert exit_code == 1, log_text
    assert "cannot join the cluster: broker" in log_text
    return log_text


def test_a_broker_whose_certificate_the_others_do_not_trust_does_not_join(
    mtls_cluster: SecuredCluster, certificates: tuple[Certificates, Path], tmp_path: Path
) -> None:
    made, _ = certificates
    mtls_cluster.cluster.restart_stopped()
    rogue_keystore = tmp_path / "rogue-keystore.pem"
    rogue_keystore.write_text(made.rogue_certificate.read_text() + made.rogue_key.read_text())
    settings = mtls_cluster.settings | {"ssl.keystore.location": str(rogue_keystore)}
    log_text = _refused_at_start(mtls_cluster.cluster, settings, tmp_path)
    # The others refuse its certificate with a TLS alert (their TLS server sends it, as Kafka's does).
    assert "refused this broker's TLS connection (TLSV1_ALERT_UNKNOWN_CA)" in log_text
    assert "keystore must hold a certificate its truststore trusts" in log_text
    admin = AdminClient(mtls_cluster.client | {"bootstrap.servers": mtls_cluster.cluster.bootstrap})
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]


def test_a_broker_with_a_wrong_inter_broker_password_does_not_join(
    scram_cluster: SecuredCluster, tmp_path: Path
) -> None:
    cluster = scram_cluster.cluster
    cluster.restart_stopped()
    settings = scram_cluster.settings | {
        "listener.name.broker.scram-sha-512.sasl.jaas.config": _jaas("broker", "not-the-password")
    }
    log_text = _refused_at_start(cluster, settings, tmp_path)
    assert "refuses this broker's inter-broker connection" in log_text
    assert "cannot log in to the broker at 127.0.0.1:" in log_text
    assert "SCRAM-SHA-512 as broker" in log_text
    # The others never saw it, and go on replicating.
    admin = AdminClient(scram_cluster.client | {"bootstrap.servers": cluster.bootstrap})
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    topic = "after-the-intruder"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(30)
    wait_until(lambda: _in_sync(scram_cluster, topic, 3), "every replica in sync")
    _produce(scram_cluster, topic, [b"still-replicated"])
    assert _consume_all(scram_cluster, topic, 1) == [b"still-replicated"]
