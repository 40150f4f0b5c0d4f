"""benchmarks/security.py's TLS record counter: a relay that keeps the length of each TLS record of
application data passing through it, in both directions, whatever the reads cut them into."""

from __future__ import annotations

import socket
import threading
import time

from benchmarks.security import TLS_APPLICATION_DATA, TlsRecordCounter, per_record

WAIT_S = 5.0
HANDSHAKE = 22


def tls_record(content_type: int, length: int) -> bytes:
    return bytes([content_type, 3, 3]) + length.to_bytes(2, "big") + bytes(length)


def receive_exactly(connection: socket.socket, size: int) -> bytes:
    received = bytearray()
    while len(received) < size:
        chunk = connection.recv(size - len(received))
        assert chunk, "the relay closed early"
        received += chunk
    return bytes(received)


def test_the_relay_counts_application_records_both_ways_and_passes_every_byte() -> None:
    sent = tls_record(HANDSHAKE, 10) + b"".join(
        tls_record(TLS_APPLICATION_DATA, length) for length in (40, 1000, 3)
    )
    answered = tls_record(TLS_APPLICATION_DATA, 16) + tls_record(TLS_APPLICATION_DATA, 5000)
    server = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            got.append(receive_exactly(connection, len(sent)))
            connection.sendall(answered)

    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    counter = TlsRecordCounter(server.getsockname()[1])
    try:
        with socket.create_connection(("127.0.0.1", counter.port)) as client:
            for index in range(0, len(sent), 7):  # record headers and bodies cut across reads
                client.sendall(sent[index : index + 7])
                time.sleep(0.001)
            assert receive_exactly(client, len(answered)) == answered
            # Counted before passed on: once the server has every byte, so do the counts.
            serving.join(WAIT_S)
            with counter.lock:
                assert counter.sent == [40, 1000, 3]  # the handshake record is not counted
                assert counter.received == [16, 5000]
    finally:
        counter.close()
        server.close()
    assert got == [sent]


def test_records_per_record_and_the_share_of_small_ones() -> None:
    assert per_record([27, 1041, 27, 1041, 16401], 10) == (0.5, 0.4)
    assert per_record([], 10) == (0.0, 0.0)
