"""Looking at processes the Spark tests start: a process and its descendants (a PySpark driver's
JVM is its child, Python workers the JVM's), and which addresses they listen on."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may hold spaces: the fields after it are fixed.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found = {pid}
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for descriptor in descriptors:
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_address: str) -> str:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        text = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        # /proc prints IPv6 addresses as four host-order 32-bit words.
        words = b"".join(raw[index : index + 4][::-1] for index in range(0, 16, 4))
        text = socket.inet_ntop(socket.AF_INET6, words)
    return f"{text}:{int(port, 16)}"


def listening_addresses(pid: int) -> set[str]:
    """host:port of every TCP socket ``pid`` or its descendants listen on."""
    inodes: set[str] = set()
    for member in descendants(pid):
        inodes |= _socket_inodes(member)
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(_address(fields[1]))
    return found


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return host in ("127.0.0.1", "::1", "::ffff:127.0.0.1")
