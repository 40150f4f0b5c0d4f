"""Produce and consume throughput over TLS and SASL beside plaintext, on one broker.

``python -m benchmarks.security [--records N] [--rounds R] [--sizes 100,1024] [--clients
confluent-kafka,strom] [--before REV] [--output BENCHMARKS.md] [--no-write]``; ``python -m
benchmarks.security --tls-records`` prints only what decrypting one TLS record costs a core, by the
plaintext bytes it carries.

One ``strom broker`` opens four listeners (PLAINTEXT, SASL_SSL with SCRAM-SHA-512, SSL with client
certificates, SASL_PLAINTEXT with PLAIN; certificates made with ``openssl`` as the tests make them).
For each listener and client, in turn and ``--rounds`` times in alternating order, one producer
process (confluent-kafka, or strom's own client) sends N records of 100 B (N/4 of 1 KiB) (acks=1,
linger 5 ms, 1 MiB batches) to a fresh topic of one partition and flushes (after twice its bytes
were written to a file and deleted, so that the broker appends into page cache memory touched
before: ``harness.touch_page_cache``); then one consumer process of the same client reads them back
from offset 0. The table gives the median rate of each listener and client and its ratio to the
client's plaintext (the issue's bar: >= 0.70 over TLS and SASL_SSL). Broker CPU per record (user + system time of the broker process) is beside it: on a
shared machine it is the figure that survives the noise; and the client's (the producer's or
consumer's whole process), which tells whether the broker or the client bounds a case.

Where a TLS connection's records end is the sender's choice (each ``SSL_write`` is a record of at
most 16 KiB), and each record costs its receiver a fixed price besides its bytes. So the run also
counts, for each client and size, the TLS records its producer writes per produced record: one
more producer of each sends N/10 records over SSL through a relay that reads the records' clear
headers (a broker of its own advertises the relay, so that every connection goes through it).

With ``--before REV`` a second broker runs the ``src`` of git revision REV beside this tree's, with
the same listeners, and every case runs on both in each round (in alternating order): rows
"before" and "after", each variant's ratios to its own plaintext.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import multiprocessing
import platform
import resource
import socket
import ssl
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.harness import Broker, cpu_seconds, free_port, touch_page_cache
from benchmarks.report import replace_section
from benchmarks.run import export_source
from tests.security.certs import Certificates, make_certificates

LISTENERS = ("PLAINTEXT", "SASL_SSL", "SSL", "SASL_PLAINTEXT")
DEFAULT_SIZES = "100,1024"
USER, PASSWORD = "bench", "bench-secret"
CASE_TIMEOUT_S = 300.0


def client_config(listener: str, port: int, certificates: Certificates) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}"}
    if listener == "SASL_SSL":
        config |= {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                   "sasl.username": USER, "sasl.password": PASSWORD, "ssl.ca.location": str(certificates.ca)}  # fmt: skip
    elif listener == "SSL":
        config |= {"security.protocol": "SSL", "ssl.ca.location": str(certificates.ca),
                   "ssl.certificate.location": str(certificates.client_certificate),
                   "ssl.key.location": str(certificates.client_key)}  # fmt: skip
    elif listener == "SASL_PLAINTEXT":
        config |= {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                   "sasl.username": USER, "sasl.password": PASSWORD}  # fmt: skip
    return config


def produce(config: dict[str, Any], topic: str, records: int, size: int, result: Any) -> None:
    producer = Producer(
        config | {"linger.ms": 5, "batch.size": 1_048_576, "queue.buffering.max.messages": 2_000_000}
    )
    producer.list_topics(timeout=30)
    value = b"x" * size
    started = time.perf_counter()
    for index in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if index % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(CASE_TIMEOUT_S) == 0
    result.put(time.perf_counter() - started)


def produce_strom(config: dict[str, Any], topic: str, records: int, size: int, result: Any) -> None:
    """``produce`` with strom's client: the same batching (acks=1, linger 5 ms, 1 MiB batches)."""
    from strom.client.producer import Producer as StromProducer

    producer = StromProducer(
        config | {"acks": 1, "linger.ms": 5, "batch.size": 1_048_576, "max.request.size": 4 << 20}
    )
    try:
        producer.partitions_for(topic)  # metadata in hand (the topic made) before the clock starts
        value = b"x" * size
        send = producer.send
        started = time.perf_counter()
        for _ in range(records):
            send(topic, value)
        producer.flush(CASE_TIMEOUT_S)
        result.put(time.perf_counter() - started)
    finally:
        producer.close()


def consume_strom(config: dict[str, Any], topic: str, records: int, result: Any) -> None:
    """``consume`` with strom's client: ``poll`` after ``assign`` at offset 0."""
    from strom.client.consumer import Consumer as StromConsumer

    consumer = StromConsumer(config | {"group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        read = 0
        started = time.perf_counter()
        deadline = started + CASE_TIMEOUT_S
        while read < records and time.perf_counter() < deadline:
            read += len(consumer.poll(1000))
        assert read == records, f"read {read} of {records}"
        result.put(time.perf_counter() - started)
    finally:
        consumer.close()


def consume(config: dict[str, Any], topic: str, records: int, result: Any) -> None:
    consumer = Consumer(config | {"group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    started = time.perf_counter()
    while read < records:
        wanted = min(100_000, records - read)  # consume() waits its timeout out for more than are left
        read += sum(1 for message in consumer.consume(wanted, 1.0) if message.error() is None)
    result.put(time.perf_counter() - started)
    consumer.close()


CLIENTS: dict[str, tuple[Any, Any]] = {
    "confluent-kafka": (produce, consume),
    "strom": (produce_strom, consume_strom),
}
DEFAULT_CLIENTS = "confluent-kafka,strom"


def timed(target: Any, *arguments: Any) -> tuple[float, float]:
    """Run ``target`` in a process of its own: the seconds it reports, and the CPU seconds
    (user + system, every thread) the whole process used."""
    result: Any = multiprocessing.Queue()
    process = multiprocessing.Process(target=target, args=(*arguments, result))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process.start()
    seconds = float(result.get(timeout=CASE_TIMEOUT_S))
    process.join(CASE_TIMEOUT_S)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # counts the process once it is reaped
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


CRYPTO_PAYLOAD_BYTES = 1 << 20
# Issue 13's bar: throughput over TLS (SSL, SASL_SSL) at least this share of plaintext's.
TLS_BAR = 0.70
CRYPTO_ROUNDS = 100


def _tls_pair(
    certificates: Certificates,
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.SSLObject, ssl.MemoryBIO]:
    """A client and a server end of one TLS connection over memory BIOs, handshake done: (client,
    the BIO its records come out of, server, the BIO the server reads records from)."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(certificates.broker_keystore))
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.load_verify_locations(str(certificates.ca))
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    for _ in range(10):  # the handshake, flight by flight
        for end in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    return client, client_out, server, server_in


def crypto_speed(certificates: Certificates) -> tuple[str, float, float]:
    """The TLS cipher this broker and a default client agree on, and one core's speed in MB/s at
    encrypting and at decrypting application data through Python's ``ssl`` memory BIOs (what the
    broker's event loop does per byte of a TLS connection): the cost no code of strom's can remove."""
    client, client_out, server, server_in = _tls_pair(certificates)
    payload = bytes(CRYPTO_PAYLOAD_BYTES)
    buffer = memoryview(bytearray(256 * 1024))
    encrypt_s = decrypt_s = 0.0
    for _ in range(CRYPTO_ROUNDS):
        started = time.perf_counter()
        client.write(payload)
        sealed = client_out.read()
        encrypt_s += time.perf_counter() - started
        started = time.perf_counter()
        server_in.write(sealed)
        with contextlib.suppress(ssl.SSLWantReadError):
            while server.read(len(buffer), buffer):
                pass
        decrypt_s += time.perf_counter() - started
    cipher = server.cipher()
    total_mb = CRYPTO_PAYLOAD_BYTES * CRYPTO_ROUNDS / 1e6
    return (cipher[0] if cipher else "?"), total_mb / encrypt_s, total_mb / decrypt_s


# Plaintext bytes per TLS record: a record's header or key and value written apart, a 1 KiB value,
# and the largest record TLS allows (what a client writing whole requests sends).
TLS_RECORD_SIZES = (40, 1024, 16384)
TLS_RECORD_BYTES_TOTAL = 64 << 20


def tls_record_costs(certificates: Certificates) -> list[tuple[int, float]]:
    """One core's CPU time to take in one TLS record (decrypt it through the memory BIOs, as the
    broker's event loop does), by the plaintext bytes the record carries: (bytes, µs per record).
    The sender decides where its records end: each ``SSL_write`` of a client's is a record (of at
    most 16 KiB), so a client that writes a produce request in pieces costs the broker a record per
    piece."""
    client, client_out, server, server_in = _tls_pair(certificates)
    buffer = memoryview(bytearray(256 * 1024))
    costs = []
    for size in TLS_RECORD_SIZES:
        piece = bytes(size)
        records = TLS_RECORD_BYTES_TOTAL // size
        sealed = []
        for _ in range(records):
            client.write(piece)
            if client_out.pending >= 1 << 20:
                sealed.append(client_out.read())
        sealed.append(client_out.read())
        started = time.process_time()
        for chunk in sealed:
            server_in.write(chunk)
            with contextlib.suppress(ssl.SSLWantReadError):
                while server.read(len(buffer), buffer):
                    pass
        costs.append((size, (time.process_time() - started) / records * 1e6))
    return costs


TLS_APPLICATION_DATA = 23  # the content type of a TLS record that carries the connection's data
TLS_RECORD_HEADER_BYTES = 5
# A TLS record carrying at most this much (its 16-17 bytes of tag and type included) is a piece of a
# request written apart: a record's header, a length, never a value of 100 B or more.
SMALL_TLS_RECORD_BYTES = 64
PATTERN_SHARE = 10  # the pattern pass sends a tenth of a case's records


class TlsRecordCounter:
    """A TCP relay on 127.0.0.1 to ``target_port`` that keeps the length of each TLS record of
    application data passing through it (read from the record's clear five-byte header): those its
    clients send (``sent``) and those they receive (``received``; both read under ``lock``). A thread
    per direction of each connection; ``close()`` stops it."""

    def __init__(self, target_port: int) -> None:
        self.sent: list[int] = []
        self.received: list[int] = []
        self.lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target_port))
            with self.lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream, self.sent), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, client, self.received), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, into: list[int]) -> None:
        pending = bytearray()
        try:
            while data := source.recv(1 << 18):
                pending += data
                lengths = []
                at = 0
                while len(pending) - at >= TLS_RECORD_HEADER_BYTES:
                    length = int.from_bytes(pending[at + 3 : at + 5], "big")
                    if len(pending) - at < TLS_RECORD_HEADER_BYTES + length:
                        break
                    if pending[at] == TLS_APPLICATION_DATA:
                        lengths.append(length)
                    at += TLS_RECORD_HEADER_BYTES + length
                del pending[:at]
                with self.lock:
                    into += lengths
                # Counted before passed on: whoever has these bytes (a producer its acks, a
                # consumer its records) finds them in the counts.
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._listener.close()
        with self.lock:
            for each in self._sockets:
                with contextlib.suppress(OSError):
                    each.close()


def tls_record_pattern(
    work: Path,
    certificates: Certificates,
    clients: list[str],
    sizes: tuple[int, ...],
    records: dict[int, int],
) -> dict[tuple[str, int], tuple[float, float, float, float]]:
    """For each client and record size, per record produced and then consumed over SSL: the TLS
    records of data its producer writes and the share of them that carry at most
    ``SMALL_TLS_RECORD_BYTES``; the TLS records of data its consumer receives and that share."""
    pattern: dict[tuple[str, int], tuple[float, float, float, float]] = {}
    for client in clients:
        for size in sizes:
            directory = work / f"pattern-{client}-{size}"
            directory.mkdir()
            broker_port = free_port()
            counter = TlsRecordCounter(broker_port)
            broker = Broker(
                directory,
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{broker_port}",
                    "advertised.listeners": f"SSL://127.0.0.1:{counter.port}",
                    "ssl.keystore.location": str(certificates.broker_keystore),
                    "ssl.truststore.location": str(certificates.ca),
                    "listener.name.ssl.ssl.client.auth": "required",
                },
            )
            try:
                count = records[size] // PATTERN_SHARE
                config = client_config("SSL", counter.port, certificates)
                producer, consumer = CLIENTS[client]
                timed(producer, config, f"pattern-{size}", count, size)
                with counter.lock:
                    sent = list(counter.sent)
                timed(consumer, config, f"pattern-{size}", count)
                with counter.lock:
                    received = list(counter.received)
            finally:
                broker.stop()
                counter.close()
            pattern[(client, size)] = (*per_record(sent, count), *per_record(received, count))
    return pattern


def per_record(lengths: list[int], records: int) -> tuple[float, float]:
    """TLS records per record produced, and the share of them that are small."""
    small = sum(1 for length in lengths if length <= SMALL_TLS_RECORD_BYTES)
    return len(lengths) / records, small / max(len(lengths), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--records", type=int, default=300_000, help="records of 100 B per case (1 KiB: a quarter)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="record sizes in bytes, comma-separated")
    parser.add_argument(
        "--clients", default=DEFAULT_CLIENTS, help=f"comma-separated, of {', '.join(CLIENTS)}"
    )
    parser.add_argument("--before", help="also run the broker of this git revision, side by side")
    parser.add_argument("--output", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--tls-records",
        action="store_true",
        help="only print what taking in one TLS record costs a core, by the bytes it carries",
    )
    arguments = parser.parse_args()
    sizes = tuple(int(size) for size in arguments.sizes.split(","))
    clients = arguments.clients.split(",")
    if unknown := set(clients) - set(CLIENTS):
        parser.error(f"unknown clients {', '.join(sorted(unknown))}: choose among {', '.join(CLIENTS)}")
    records_of = {size: arguments.records if size == 100 else arguments.records // 4 for size in sizes}
    work = Path(tempfile.mkdtemp(prefix="strom-security-bench-"))
    certificates = make_certificates(work / "certificates")
    if arguments.tls_records:
        for size, micros in tls_record_costs(certificates):
            print(
                f"TLS records of {size:>6,} B: {micros:6.2f} µs of CPU each to decrypt, {micros / size * 1e3:7.2f} ns per byte"
            )
        return
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'
    sources: dict[str, Path | None] = {"after": None}
    if arguments.before:
        sources = {"before": export_source(arguments.before, work / "before-src"), "after": None}
    brokers: dict[str, tuple[Broker, dict[str, int]]] = {}
    rates: dict[tuple[str, str, int, str], dict[str, list[float]]] = {}
    try:
        for variant, source in sources.items():
            ports = {name: free_port() for name in LISTENERS[1:]}
            settings = {
                "listeners": "PLAINTEXT://127.0.0.1:0,"
                + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                "ssl.keystore.location": str(certificates.broker_keystore),
                "ssl.truststore.location": str(certificates.ca),
                "listener.name.ssl.ssl.client.auth": "required",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            }
            (work / variant).mkdir()
            broker = Broker(
                work / variant,
                settings,
                source_dir=source,
                arguments=["--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
            )
            ports["PLAINTEXT"] = broker.port
            brokers[variant] = (broker, ports)
        for size in sizes:
            records = records_of[size]
            for round_index in range(arguments.rounds):
                order = LISTENERS if round_index % 2 == 0 else tuple(reversed(LISTENERS))
                variants = list(brokers) if round_index % 2 == 0 else list(reversed(brokers))
                for listener, client, variant in itertools.product(order, clients, variants):
                    producer, consumer = CLIENTS[client]
                    broker, ports = brokers[variant]
                    config = client_config(listener, ports[listener], certificates)
                    topic = f"bench-{client}-{listener.lower()}-{size}-{round_index}"
                    entry = rates.setdefault(
                        (client, variant, size, listener),
                        {
                            "produce": [],
                            "consume": [],
                            "cpu_p": [],
                            "cpu_c": [],
                            "client_p": [],
                            "client_c": [],
                        },
                    )
                    touch_page_cache(work, 2 * records * size)
                    cpu = cpu_seconds(broker.process.pid)
                    seconds, client_s = timed(producer, config, topic, records, size)
                    entry["produce"].append(records / seconds)
                    entry["cpu_p"].append((cpu_seconds(broker.process.pid) - cpu) / records * 1e6)
                    entry["client_p"].append(client_s / records * 1e6)
                    cpu = cpu_seconds(broker.process.pid)
                    seconds, client_s = timed(consumer, config, topic, records)
                    entry["consume"].append(records / seconds)
                    entry["cpu_c"].append((cpu_seconds(broker.process.pid) - cpu) / records * 1e6)
                    entry["client_c"].append(client_s / records * 1e6)
    finally:
        for broker, _ in brokers.values():
            broker.stop()
    pattern = tls_record_pattern(work, certificates, clients, sizes, records_of)
    command = f"python -m benchmarks.security --records {arguments.records} --rounds {arguments.rounds}"
    if arguments.sizes != DEFAULT_SIZES:
        command += f" --sizes {arguments.sizes}"
    if arguments.clients != DEFAULT_CLIENTS:
        command += f" --clients {arguments.clients}"
    if arguments.before:
        command += f" --before {arguments.before}"
    lines = [
        "## TLS and SASL beside plaintext (`python -m benchmarks.security`)",
        "",
        f"Run: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC with `{command}`.",
        f"Machine: {platform.processor() or platform.machine()}, {multiprocessing.cpu_count()} CPUs,"
        f" Python {platform.python_version()}; one producer and one consumer process of the client"
        f" ({', '.join(clients)}), one partition; medians of the rounds, listeners in alternating order.",
        "",
        "| records | listener | client | broker | produce rec/s | / plaintext | consume rec/s | / plaintext |"
        " broker CPU µs/record produce | consume | client CPU µs/record producer | consumer |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def median_of(client: str, variant: str, size: int, listener: str, kind: str) -> float:
        return statistics.median(rates[(client, variant, size, listener)][kind])

    for size, listener, client, variant in itertools.product(sizes, LISTENERS, clients, brokers):
        produce_rate = median_of(client, variant, size, listener, "produce")
        consume_rate = median_of(client, variant, size, listener, "consume")
        label = variant if arguments.before else "this tree"
        lines.append(
            f"| {size} B | {listener} | {client} | {label} | {produce_rate:,.0f}"
            f" | {produce_rate / median_of(client, variant, size, 'PLAINTEXT', 'produce'):.2f}"
            f" | {consume_rate:,.0f} | {consume_rate / median_of(client, variant, size, 'PLAINTEXT', 'consume'):.2f}"
            f" | {median_of(client, variant, size, listener, 'cpu_p'):.2f}"
            f" | {median_of(client, variant, size, listener, 'cpu_c'):.2f}"
            f" | {median_of(client, variant, size, listener, 'client_p'):.2f}"
            f" | {median_of(client, variant, size, listener, 'client_c'):.2f} |"
        )
    cipher, encrypt_mb_s, decrypt_mb_s = crypto_speed(certificates)
    largest = max(sizes)
    first = clients[0]
    produce_mb_s = median_of(first, "after", largest, "PLAINTEXT", "produce") * largest / 1e6
    consume_mb_s = median_of(first, "after", largest, "PLAINTEXT", "consume") * largest / 1e6
    # Over TLS each byte produced is encrypted once (producer) and decrypted once (broker); each
    # byte consumed the reverse (broker, consumer) — on the same two CPUs here.
    crypto_cores_produce = produce_mb_s / encrypt_mb_s + produce_mb_s / decrypt_mb_s
    crypto_cores_consume = consume_mb_s / encrypt_mb_s + consume_mb_s / decrypt_mb_s
    lines += [
        "",
        f"TLS's own cost on this machine: {cipher}; one core encrypts {encrypt_mb_s:,.0f} MB/s and decrypts"
        f" {decrypt_mb_s:,.0f} MB/s through Python's `ssl` (memory BIOs, as the event loop does). Each byte"
        " produced over TLS is encrypted once (producer) and decrypted once (broker), each byte consumed"
        f" the reverse: at {first}'s plaintext {largest} B rates ({produce_mb_s:,.0f} MB/s produce,"
        f" {consume_mb_s:,.0f} MB/s"
        f" consume) that alone takes {crypto_cores_produce:.2f} and {crypto_cores_consume:.2f} of this"
        f" machine's {multiprocessing.cpu_count()} CPUs, beside what the plaintext run already spends on"
        " the clients and the broker.",
    ]
    lines += [
        "",
        "TLS records of data per record, the producer's to the broker and the broker's to the consumer"
        f" (over SSL, {PATTERN_SHARE} times fewer records than a case, through a relay that reads the"
        f" records' clear headers; small: at most {SMALL_TLS_RECORD_BYTES} B), and what TLS adds to the"
        " broker's CPU per record (SSL row minus PLAINTEXT row above):",
        "",
        "| client | records | produce: TLS records per record | small | broker CPU µs/record added"
        " | consume: TLS records per record | small | broker CPU µs/record added |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for client, size in itertools.product(clients, sizes):
        sent, sent_small, received, received_small = pattern[(client, size)]
        added = {
            kind: median_of(client, "after", size, "SSL", kind)
            - median_of(client, "after", size, "PLAINTEXT", kind)
            for kind in ("cpu_p", "cpu_c")
        }
        lines.append(
            f"| {client} | {size} B | {sent:.2f} | {sent_small:.0%} | {added['cpu_p']:.2f}"
            f" | {received:.2f} | {received_small:.0%} | {added['cpu_c']:.2f} |"
        )
    worst = {
        (client, size): min(
            median_of(client, "after", size, listener, kind)
            / median_of(client, "after", size, "PLAINTEXT", kind)
            for listener in ("SSL", "SASL_SSL")
            for kind in ("produce", "consume")
        )
        for client, size in itertools.product(clients, sizes)
    }
    lines += [
        "",
        "Bar: produce and consume over SSL and SASL_SSL at least 0.70 of plaintext"
        + (" (this tree's broker, the after rows)" if arguments.before else "")
        + " — "
        + "; ".join(
            f"{client} {size} B: {'met' if ratio >= TLS_BAR else 'not met'} (worst {ratio:.2f})"
            for (client, size), ratio in worst.items()
        )
        + ". Broker CPU per record is the figure TLS moves: the difference from plaintext is what"
        " encryption and the event loop's TLS layer cost the broker. Client CPU per record is the"
        " whole client process's (every thread, its start and its metadata request included): a"
        " client that spends more per record than the broker does, at a rate near one core's"
        " worth of it, is what bounds that case (librdkafka encrypts on one thread per broker).",
    ]
    section = "\n".join(lines)
    print(section)
    if not arguments.no_write:
        replace_section(arguments.output, "security", section)


if __name__ == "__main__":
    main()
