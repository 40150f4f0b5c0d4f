"""The real ``strom broker`` executable started from a Kafka-style ``server.properties``: it listens
where ``listeners`` says, tells clients what ``advertised.listeners`` says (Metadata and
FindCoordinator, per listener), accepts Kafka's keys it does not use with one warning, refuses
typos, bad ports and listeners it cannot serve, and logs crash recovery only after a crash."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.cli_support import run_strom, strom_executable
from tests.compat.conftest import BrokerProcess, free_port
from tests.compat.support import (
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    unique_topic,
)

pytestmark = pytest.mark.compat

# Kafka 3.x's config/server.properties (ZooKeeper mode) as it ships, comments and all, with the
# listener settings filled in and the data directory moved.
STOCK_SERVER_PROPERTIES = """\
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.

############################# Server Basics #############################

# The id of the broker. This must be set to a unique integer for each broker.
broker.id=0

############################# Socket Server Settings #############################

# The address the socket server listens on. If not configured, the host name will be equal to the value of
# java.net.InetAddress.getCanonicalHostName(), with PLAINTEXT listener name, and port 9092.
#   FORMAT:
#     listeners = listener_name://host_name:port
#   EXAMPLE:
#     listeners = PLAINTEXT://your.host.name:9092
{listeners}

# Listener name, hostname and port the broker will advertise to clients.
# If not set, it uses the value for "listeners".
{advertised}

# Maps listener names to security protocols, the default is for them to be the same. See the config documentation for more details
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
{protocol_map}

# The number of threads that the server uses for receiving requests from the network and sending responses to the network
num.network.threads=3

# The number of threads that the server uses for processing requests, which may include disk I/O
num.io.threads=8

# The send buffer (SO_SNDBUF) used by the socket server
socket.send.buffer.bytes=102400

# The receive buffer (SO_RCVBUF) used by the socket server
socket.receive.buffer.bytes=102400

# The maximum size of a request that the socket server will accept (protection against OOM)
socket.request.max.bytes=104857600


############################# Log Basics #############################

# A comma separated list of directories under which to store log files
log.dirs={log_dirs}

# The default number of log partitions per topic.
num.partitions=1

# The number of threads per data directory to be used for log recovery at startup and flushing at shutdown.
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Flush Policy #############################
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000

############################# Log Retention Policy #############################
log.retention.hours=168
#log.retention.bytes=1073741824
#log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

############################# Zookeeper #############################
# Set, these two make the broker one of a cluster, as in Kafka (docs/cluster.md): this single
# node leaves them commented out.
#zookeeper.connect=localhost:2181
#zookeeper.connection.timeout.ms=18000

############################# Group Coordinator Settings #############################
group.initial.rebalance.delay.ms=0
"""

UNUSED_STOCK_KEYS = (
    "num.io.threads",
    "num.network.threads",
    "num.recovery.threads.per.data.dir",
    "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes",
)
RECOVERY_LINE = "no clean shutdown marker"


def write_properties(
    path: Path, *, listeners: str = "", advertised: str = "", protocol_map: str = ""
) -> Path:
    path.write_text(
        STOCK_SERVER_PROPERTIES.format(
            listeners=f"listeners={listeners}" if listeners else "#listeners=PLAINTEXT://:9092",
            advertised=f"advertised.listeners={advertised}" if advertised else "#advertised.listeners=",
            protocol_map=f"listener.security.protocol.map={protocol_map}" if protocol_map else "",
            log_dirs=path.parent / "kafka-logs",
        ),
        encoding="utf-8",
    )
    return path


class ConfiguredBroker(BrokerProcess):
    """The ``strom`` executable with ``--config FILE`` (and extra arguments), waited for on ``port``."""

    def __init__(self, work_dir: Path, config: Path, port: int, *arguments: str) -> None:
        super().__init__(work_dir)
        self.config = config
        self.port = port
        self.arguments = arguments

    def command(self) -> list[str]:
        return [strom_executable(), "broker", "--config", str(self.config), *self.arguments]


@pytest.fixture
def brokers() -> Iterator[list[ConfiguredBroker]]:
    started: list[ConfiguredBroker] = []
    yield started
    for broker in started:
        broker.close()


def start(brokers: list[ConfiguredBroker], broker: ConfiguredBroker) -> ConfiguredBroker:
    brokers.append(broker)
    broker.start()
    return broker


def advertised_brokers(bootstrap: str) -> list[tuple[str, int]]:
    metadata = admin_client(bootstrap).list_topics(timeout=10)
    return [(found.host, found.port) for found in metadata.brokers.values()]


def coordinator_of(bootstrap: str, group: str) -> tuple[str, int]:
    admin = admin_client(bootstrap)  # kept until the answer is in: dropping it cancels the request
    futures = admin.describe_consumer_groups([group], request_timeout=10)
    description = futures[group].result(30)
    return description.coordinator.host, description.coordinator.port


def commit_something(bootstrap: str, topic: str, group: str) -> None:
    create_topic(bootstrap, topic)
    producer = confluent_producer(bootstrap)
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    consumer = confluent_consumer(bootstrap, group_id=group, enable_partition_eof=False)
    consumer.subscribe([topic])
    message = None
    for _ in range(60):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
    assert message is not None and message.value() == b"hello"
    consumer.commit(message, asynchronous=False)
    consumer.close()


def test_a_stock_server_properties_is_honoured(tmp_path: Path, brokers: list[ConfiguredBroker]) -> None:
    port = free_port()
    config = write_properties(
        tmp_path / "server.properties",
        listeners=f"PLAINTEXT://127.0.0.1:{port}",
        advertised=f"PLAINTEXT://localhost:{port}",
    )
    broker = start(brokers, ConfiguredBroker(tmp_path, config, port))
    bootstrap = f"127.0.0.1:{port}"

    # Clients are told the advertised address, in Metadata and in FindCoordinator.
    assert advertised_brokers(bootstrap) == [("localhost", port)]
    commit_something(bootstrap, unique_topic("stock"), "stock-group")
    assert coordinator_of(bootstrap, "stock-group") == ("localhost", port)
    # log.dirs from the file is the data directory.
    assert (tmp_path / "kafka-logs" / "__topics").is_dir()

    log = broker.log_text()
    warnings = [line for line in log.splitlines() if "ignoring Kafka settings strom does not use" in line]
    assert len(warnings) == 1, log
    assert warnings[0].endswith(": " + ", ".join(UNUSED_STOCK_KEYS))
    assert f"listening on ('127.0.0.1', {port}), advertised as PLAINTEXT://localhost:{port}" in log
    # A brand-new data directory is not a crash.
    assert RECOVERY_LINE not in log

    # A clean restart is not either; a kill -9 is, and only the start after it says so.
    broker.restart()
    assert RECOVERY_LINE not in broker.log_text()
    broker.kill()
    broker.start()
    assert broker.log_text().count(RECOVERY_LINE) == 1


def test_each_listener_advertises_its_own_address(tmp_path: Path, brokers: list[ConfiguredBroker]) -> None:
    internal, external = free_port(), free_port()
    config = write_properties(
        tmp_path / "server.properties",
        listeners=f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        advertised=f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}",
        protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    start(brokers, ConfiguredBroker(tmp_path, config, internal))
    assert advertised_brokers(f"127.0.0.1:{internal}") == [("127.0.0.1", internal)]
    assert advertised_brokers(f"127.0.0.1:{external}") == [("localhost", external)]
    # Records produced through one listener are read through the other.
    topic = unique_topic("two-listeners")
    commit_something(f"127.0.0.1:{external}", topic, "external-group")
    assert coordinator_of(f"127.0.0.1:{external}", "external-group") == ("localhost", external)
    assert coordinator_of(f"127.0.0.1:{internal}", "external-group") == ("127.0.0.1", internal)


def test_host_and_port_flags_replace_the_first_listener(
    tmp_path: Path, brokers: list[ConfiguredBroker]
) -> None:
    in_file, on_command_line = free_port(), free_port()
    config = write_properties(tmp_path / "server.properties", listeners=f"PLAINTEXT://127.0.0.1:{in_file}")
    broker = start(
        brokers, ConfiguredBroker(tmp_path, config, on_command_line, "--port", str(on_command_line))
    )
    assert advertised_brokers(f"127.0.0.1:{on_command_line}") == [("127.0.0.1", on_command_line)]
    assert f"listening on ('127.0.0.1', {on_command_line})" in broker.log_text()
    assert f"('127.0.0.1', {in_file})" not in broker.log_text()


def test_port_zero_advertises_the_port_the_listener_got(tmp_path: Path) -> None:
    config = write_properties(tmp_path / "server.properties", listeners="PLAINTEXT://127.0.0.1:0")
    log_path = tmp_path / "broker.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [strom_executable(), "broker", "--config", str(config)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        found = None
        for _ in range(600):
            found = re.search(
                r"listening on \('127\.0\.0\.1', (\d+)\), advertised as (\S+),", log_path.read_text()
            )
            if found or process.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert found, log_path.read_text()
        port = int(found.group(1))
        assert port > 0
        assert found.group(2) == f"PLAINTEXT://127.0.0.1:{port}"
        assert advertised_brokers(f"127.0.0.1:{port}") == [("127.0.0.1", port)]
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--port", "99999"], "argument --port: 99999 is out of range (0..65535; 0 picks a free port)"),
        (["--port", "65536"], "argument --port: 65536 is out of range"),
        (["--port", "-1"], "argument --port: -1 is out of range"),
        (["--metrics-port", "70000"], "argument --metrics-port: 70000 is out of range"),
        (["--set", "listeners=PLAINTEXT://127.0.0.1:65536"], "port 65536 is out of range"),
        (
            ["--set", "listeners=SSL://127.0.0.1:19093"],
            "listener SSL needs the broker's certificate and key: ssl.keystore.location",
        ),
        (["--set", "listeners=127.0.0.1:19093"], "is not NAME://HOST:PORT"),
        (
            ["--set", "advertised.listeners=PLAINTEXT://0.0.0.0:9092"],
            "advertise a routable host name or address",
        ),
        (
            ["--set", "num.partition=3"],
            "unknown configuration key(s): num.partition (did you mean num.partitions?)",
        ),
        (["--set", "zookeeper.conect=localhost:2181"], "did you mean zookeeper.connect?"),
        (
            ["--set", "log.dirs=/tmp/a,/tmp/b"],
            "names several directories; a strom broker keeps its data in one",
        ),
    ],
)
def test_bad_settings_stop_the_broker_before_it_listens(
    arguments: list[str], message: str, tmp_path: Path
) -> None:
    data_dir = [] if "log.dirs" in " ".join(arguments) else ["--data-dir", str(tmp_path / "data")]
    finished = run_strom("broker", *data_dir, *arguments, timeout_s=60)
    assert finished.returncode == 2, finished
    assert message in finished.stderr, finished.stderr
    assert not (tmp_path / "data").exists()
