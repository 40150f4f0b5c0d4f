"""The sans-I/O connection to one broker: framing, correlation ids, version negotiation.

Bytes go in with ``receive_data()``; completed exchanges come out as ``Completion``s that carry
the caller's token and either the decoded response or the error that ended it. ``send()`` returns
the bytes to write. The object never touches a socket or a clock, so pipelining, partial frames
and a broker answering out of order are tested by feeding it bytes.

Version negotiation: the first request on every connection is ApiVersions (``handshake()``); until
its answer is in, ``send()`` refuses other requests. Each API is then used at the highest version
both sides support, capped by ``CLIENT_VERSION_CAPS`` where this client implements less than the
generated codec can encode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.client.errors import KafkaConnectionError, KafkaError, ProtocolError, UnsupportedVersionError
from strom.client.fetch_codec import decode_fetch_response
from strom.client.metadata_codec import decode_metadata_response
from strom.client.produce_codec import decode_produce_response
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME, request_class, response_class
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import FrameReceiver
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.primitives import DecodeError

__all__ = ["CLIENT_VERSION_CAPS", "Completion", "Connection", "VersionRange"]

API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
PRODUCE_KEY = 0
FETCH_KEY = 1
METADATA_KEY = 3
# Answers read in one pass when they have their usual shape (None: the generated decoder reads them).
_FAST_DECODERS: dict[int, Callable[[memoryview, int], Any]] = {
    PRODUCE_KEY: decode_produce_response,
    FETCH_KEY: decode_fetch_response,
    METADATA_KEY: decode_metadata_response,
}
_UNSUPPORTED_VERSION_BYTES = int(ErrorCode.UNSUPPORTED_VERSION).to_bytes(2, "big", signed=True)

# Highest versions this client speaks where that is lower than what the codec can encode.
# Fetch 13+ names topics by id; the fetcher names them by name. AddPartitionsToTxn 4+ is for
# brokers (KIP-890 verification); EndTxn 5+ bumps the epoch on every transaction (KIP-890 part 2),
# which the transactional producer does not do.
CLIENT_VERSION_CAPS: dict[int, int] = {1: 12, 24: 3, 26: 4}

# Lowest versions the client's code paths need: record batches v2 for Produce (3) and Fetch (4);
# SaslHandshake (17) v1, after which the SASL messages travel in SaslAuthenticate requests (v0 sent
# them as bare frames, which this client does not speak).
CLIENT_VERSION_FLOORS: dict[int, int] = {0: 3, 1: 4, 2: 1, 3: 1, 17: 1}


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int


@dataclass(slots=True)
class Completion:
    """The end of one exchange: ``response`` or ``error`` is set, never both."""

    token: Any
    api_key: int
    api_version: int
    response: Any = None
    error: KafkaError | None = None


@dataclass(slots=True)
class _Pending:
    token: Any
    api_key: int
    api_version: int


class Connection:
    """One broker connection's protocol state. Not thread-safe: one owner (the loop thread)."""

    def __init__(self, client_id: str | None, frame_bytes_max: int, *, api_versions_version: int = 3) -> None:
        self.client_id = client_id
        # Answers are cut from what the socket reads into the receiver's buffers: a large one (a
        # fetch) gets a buffer of the size its prefix declares, which the socket (or the TLS layer)
        # fills directly, as librdkafka reads an answer. The broker is trusted to send what it
        # declares, up to receive.message.max.bytes (``frame_bytes_max``).
        self._receiver = FrameReceiver(frame_bytes_max)
        self._next_correlation_id = 0
        self._pending: dict[int, _Pending] = {}
        self._api_versions_version = min(api_versions_version, ApiVersionsRequest.MAX_VERSION)
        self.broker_versions: dict[int, VersionRange] | None = None
        self.closed_error: KafkaError | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """The handshake is done and the connection is not broken."""
        return self.broker_versions is not None and self.closed_error is None

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived (the handshake included)."""
        return len(self._pending)

    def version_for(self, api_key: int) -> int:
        """The version to use for ``api_key``: the highest both sides support."""
        assert self.broker_versions is not None, "version_for() before the ApiVersions handshake"
        broker = self.broker_versions.get(api_key)
        ours = request_class(api_key)
        high = min(ours.MAX_VERSION, CLIENT_VERSION_CAPS.get(api_key, ours.MAX_VERSION))
        low = max(ours.MIN_VERSION, CLIENT_VERSION_FLOORS.get(api_key, ours.MIN_VERSION))
        if broker is None or broker.max_version < low or broker.min_version > high:
            offered = "none" if broker is None else f"{broker.min_version}-{broker.max_version}"
            raise UnsupportedVersionError(
                f"broker supports {ours.NAME[: -len('Request')]} versions {offered}; this client needs {low}-{high}"
            )
        return int(min(high, broker.max_version))

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
        except UnsupportedVersionError:
            return False
        return True

    # -- sending -------------------------------------------------------------------------------

    def handshake(self) -> bytes:
        """The ApiVersions request that opens the connection."""
        request = ApiVersionsRequest(
            client_software_name=STROM_CLIENT_SOFTWARE_NAME, client_software_version="0.1.0"
        )
        return self._frame(request, self._api_versions_version, token=None, expect_response=True)

    def send(self, request: Any, token: Any = None, *, expect_response: bool = True) -> bytes:
        """Encode ``request`` at the negotiated version; its completion will carry ``token``.

        With ``expect_response=False`` (Produce with acks=0) nothing is remembered: the broker
        sends no answer.
        """
        if self.closed_error is not None:
            raise self.closed_error
        version = self.version_for(request.API_KEY)
        return self._frame(request, version, token, expect_response)

    def _frame(self, request: Any, version: int, token: Any, expect_response: bool) -> bytes:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        # A request that gives its body in pieces (a Produce request: its batches among them) has
        # them copied once, into the frame.
        encode_parts = getattr(request, "encode_parts", None)
        body = encode_parts(version) if encode_parts is not None else request.encode(version)
        frame = encode_request(request.API_KEY, version, correlation_id, self.client_id, body)
        if expect_response:
            self._pending[correlation_id] = _Pending(token, request.API_KEY, version)
        return frame

    # -- receiving -----------------------------------------------------------------------------

    def read_buffer(self) -> memoryview:
        """Where the socket's next read should write (never empty); then ``bytes_read``."""
        return self._receiver.buffer()

    def bytes_read(self, nbytes: int) -> tuple[list[Completion], bytes]:
        """``nbytes`` were read into the start of the last ``read_buffer()``. Returns the completed
        exchanges and bytes to send now (a retried handshake). A framing or decoding error breaks
        the connection: every pending exchange completes with a ``ProtocolError`` and the caller
        must close the socket."""
        if self.closed_error is not None:
            return [], b""
        try:
            frames = self._receiver.received(nbytes)
        except DecodeError as error:
            return self.connection_lost(ProtocolError(f"broker sent a bad frame: {error}")), b""
        if not frames:
            return [], b""
        return self._complete_frames(frames)

    def receive_data(self, data: bytes | bytearray | memoryview) -> tuple[list[Completion], bytes]:
        """``bytes_read`` for bytes read elsewhere: copied into the read buffers, as a read would."""
        completions: list[Completion] = []
        outgoing = b""
        left = memoryview(data)
        while self.closed_error is None:
            buffer = self._receiver.buffer()
            size = min(len(buffer), len(left))
            buffer[:size] = left[:size]
            left = left[size:]
            done, resend = self.bytes_read(size)
            completions += done
            outgoing += resend
            if not left:
                break
        return completions, outgoing

    def _complete_frames(self, frames: list[bytearray]) -> tuple[list[Completion], bytes]:
        completions: list[Completion] = []
        outgoing = b""
        for frame in frames:
            try:
                completion, resend = self._complete(frame)
            except (DecodeError, ValueError, KeyError) as error:
                completions.extend(self.connection_lost(ProtocolError(f"undecodable response: {error}")))
                return completions, b""
            if completion is not None:
                completions.append(completion)
            outgoing += resend
        return completions, outgoing

    def _complete(self, frame: bytes | bytearray | memoryview) -> tuple[Completion | None, bytes]:
        if len(frame) < 4:
            raise DecodeError("response shorter than its correlation id")
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            raise DecodeError(f"response to correlation id {correlation_id} that is not in flight")
        _, body_offset = decode_response_header(frame, pending.api_key, pending.api_version)
        body = memoryview(frame)[body_offset:]
        decode_version = pending.api_version
        if pending.api_key == API_VERSIONS_KEY and bytes(body[:2]) == _UNSUPPORTED_VERSION_BYTES:
            # A broker refusing our ApiVersions version answers in v0, the one every client reads.
            decode_version = 0
        fast_decode = _FAST_DECODERS.get(pending.api_key)
        response = fast_decode(body, decode_version) if fast_decode is not None else None
        if response is None:
            response = response_class(pending.api_key).decode(body, decode_version)
        if pending.api_key == API_VERSIONS_KEY and pending.token is None:
            return None, self._on_api_versions(response, pending.api_version)
        return Completion(pending.token, pending.api_key, pending.api_version, response=response), b""

    def _on_api_versions(self, response: ApiVersionsResponse, version: int) -> bytes:
        versions = {
            entry.api_key: VersionRange(entry.min_version, entry.max_version) for entry in response.api_keys
        }
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            # The broker answered at v0 and listed what it takes: retry at its highest ApiVersions.
            offered = versions.get(API_VERSIONS_KEY)
            self._api_versions_version = min(version - 1, offered.max_version if offered else 0)
            return self.handshake()
        if response.error_code != ErrorCode.NONE:
            error = KafkaConnectionError(f"ApiVersions failed: {ErrorCode(response.error_code).name}")
            self.closed_error = error
            return b""
        self.broker_versions = versions
        return b""

    def connection_lost(self, error: KafkaError) -> list[Completion]:
        """The socket is gone (or unusable): every exchange in flight fails with ``error``."""
        if self.closed_error is None:
            self.closed_error = error
        completions = [
            Completion(pending.token, pending.api_key, pending.api_version, error=error)
            for pending in self._pending.values()
            if pending.token is not None
        ]
        self._pending.clear()
        return completions
