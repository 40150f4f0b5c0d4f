"""SASL PLAIN (RFC 4616), server side: one message ``[authzid] NUL authcid NUL passwd``.

Passwords are compared in constant time, and an unknown user costs the same comparison as a known
one, so neither the answer nor its timing tells whether a user exists.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

# RFC 4616 bounds each of the three fields at 255 octets; a message longer than that is not PLAIN.
MESSAGE_BYTES_MAX = 3 * 255 + 2
FAILED = "Authentication failed: Invalid username or password"
_ABSENT_PASSWORD = b"\x00" * 32  # compared against when the user is unknown


class PlainError(Exception):
    """The exchange failed; the message is safe to send to the peer."""


def parse_plain_message(message: bytes) -> tuple[str, str, str]:
    """(authzid, authcid, password) of a PLAIN message; PlainError if it is not one."""
    if len(message) > MESSAGE_BYTES_MAX:
        raise PlainError("Authentication failed: the PLAIN message is too long")
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise PlainError("Authentication failed: the PLAIN message must hold 3 fields separated by NUL")
    try:
        authzid, authcid, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise PlainError("Authentication failed: the PLAIN message is not UTF-8") from None
    if not authcid:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    return authzid, authcid, password


class PlainServer:
    """One PLAIN exchange against ``users`` (name -> password): ``step`` once, then ``username``."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False
        self.failure: str | None = None  # why it failed, for the server's log only

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise PlainError("Authentication failed: the PLAIN exchange is already complete")
        self.complete = True
        authzid, authcid, password = parse_plain_message(token)
        if authzid and authzid != authcid:
            self.failure = "authorization id differs from the user name"
            raise PlainError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        expected = self._users.get(authcid)
        given = password.encode("utf-8")
        matches = hmac.compare_digest(given, _ABSENT_PASSWORD if expected is None else expected.encode())
        if expected is None or not matches:
            self.failure = (
                f"unknown user {authcid!r}" if expected is None else f"wrong password for {authcid!r}"
            )
            raise PlainError(FAILED)
        self.username = authcid
        return b""
