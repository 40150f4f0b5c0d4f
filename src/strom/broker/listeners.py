"""Kafka's listener settings: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``, parsed into endpoints.

A listener is ``NAME://HOST:PORT``: NAME is a security protocol (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``) or a name that ``listener.security.protocol.map`` maps to one
(``INTERNAL:PLAINTEXT,EXTERNAL:SSL``); names are case-insensitive and kept upper-case. HOST may be
empty (every interface) and an IPv6 address is written in brackets (``PLAINTEXT://[::1]:9092``).
Several listeners are separated by commas; their names must differ, and so must their ports
(unless one is IPv4 and the other IPv6), as Kafka requires.

Pure functions of text, shared by the broker (which listeners to open, what Metadata and
FindCoordinator answer) and the cluster (the endpoints a broker registers in ZooKeeper). Which
protocols a broker can actually serve is the caller's decision (``unserved_protocols``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from strom.cluster.model import Endpoint

# Kafka's SecurityProtocol names, and the map Kafka uses when listener.security.protocol.map is not set.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP: Mapping[str, str] = {name: name for name in SECURITY_PROTOCOLS}
PORT_MAX = 65535

_LISTENER = re.compile(
    r"(?P<name>[A-Za-z0-9_.-]+)://(?:\[(?P<ipv6>[0-9A-Za-z:.%]*)\]|(?P<host>[0-9A-Za-z._%-]*)):(?P<port>[+-]?\d+)"
)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class ListenerError(ValueError):
    """A listener setting does not parse or breaks one of Kafka's rules; the message names it."""


def parse_port(text: str, what: str, *, allow_zero: bool) -> int:
    """A TCP port from text: 1..65535, or 0 ("any free port") where ``allow_zero``."""
    try:
        port = int(text.strip())
    except ValueError:
        raise ListenerError(f"{what}: {text!r} is not a port number") from None
    low = 0 if allow_zero else 1
    if not low <= port <= PORT_MAX:
        allowed = "0 (any free port) or 1..65535" if allow_zero else "1..65535"
        raise ListenerError(f"{what}: port {port} is out of range ({allowed})")
    return port


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL[,NAME:PROTOCOL...]``; empty text is Kafka's default."""
    if not text.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    mapping: dict[str, str] = {}
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            continue
        name, separator, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not separator or not _NAME.fullmatch(name):
            raise ListenerError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {entry!r}: unknown security protocol {protocol!r}"
                f" (Kafka's are {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in mapping:
            raise ListenerError(f"listener.security.protocol.map: listener name {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def parse_listeners(
    text: str, protocol_map: Mapping[str, str], *, setting: str = "listeners", advertised: bool = False
) -> tuple[Endpoint, ...]:
    """The endpoints of a ``listeners`` (or, with ``advertised``, ``advertised.listeners``) value.

    Bind addresses may use port 0 (any free port) and an empty host (every interface); advertised
    ones need a port and a host clients can connect to, and may repeat a port (a load balancer in
    front of several listeners), as Kafka allows.
    """
    endpoints: list[Endpoint] = []
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            continue
        match = _LISTENER.fullmatch(entry)
        if match is None:
            raise ListenerError(
                f"{setting}: {entry!r} is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092,"
                " PLAINTEXT://:9092 for every interface, PLAINTEXT://[::1]:9092)"
            )
        name = match["name"].upper()
        host = match["ipv6"] if match["ipv6"] is not None else match["host"]
        port = parse_port(match["port"], f"{setting}: {entry}", allow_zero=not advertised)
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ListenerError(
                f"{setting}: listener name {name} is neither a security protocol nor in"
                f" listener.security.protocol.map (add {name}:PLAINTEXT to it)"
            )
        if advertised and host in ("", "0.0.0.0", "::"):
            raise ListenerError(
                f"{setting}: {entry}: clients cannot connect to {host or 'an empty host'};"
                " advertise a routable host name or address"
            )
        endpoints.append(Endpoint(name, host, port, protocol))
    names = [endpoint.listener for endpoint in endpoints]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ListenerError(f"{setting}: listener name {', '.join(repeated)} appears more than once")
    if not advertised:
        _check_distinct_ports(endpoints, setting)
    return tuple(endpoints)


def _check_distinct_ports(endpoints: Iterable[Endpoint], setting: str) -> None:
    seen: dict[tuple[int, bool], Endpoint] = {}
    for endpoint in endpoints:
        if endpoint.port == 0:
            continue
        key = (endpoint.port, ":" in endpoint.host)  # an IPv4 and an IPv6 listener may share a port
        if key in seen:
            raise ListenerError(f"{setting}: {seen[key]} and {endpoint} use the same port")
        seen[key] = endpoint


def format_listener(endpoint: Endpoint) -> str:
    """``NAME://HOST:PORT`` with an IPv6 host in brackets, as Kafka writes endpoints."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{endpoint.listener}://{host}:{endpoint.port}"


def unserved_protocols(endpoints: Iterable[Endpoint], served: Iterable[str]) -> list[Endpoint]:
    """The endpoints whose security protocol is not among ``served``."""
    allowed = set(served)
    return [endpoint for endpoint in endpoints if endpoint.security_protocol not in allowed]
