"""SCRAM credentials through the admin API (KIP-554): what DescribeUserScramCredentials and
AlterUserScramCredentials carry, built and read by pure functions (``Admin`` sends them).

An upsertion never sends the password: the client picks a random salt and sends
``SaltedPassword = Hi(password, salt, iterations)`` (RFC 5802), from which the broker derives and
stores StoredKey and ServerKey. Whoever reads the request learns what a stolen credential store
would tell them, not the password.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom.client.errors import ProtocolError, error_for_code
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from strom.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from strom.security.scram import ITERATIONS_MAX, ITERATIONS_MIN, SALT_BYTES, salted_password

__all__ = [
    "DEFAULT_ITERATIONS",
    "SCRAM_MECHANISM_CODES",
    "ScramCredentialInfo",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "alter_user_scram_credentials_request",
    "describe_user_scram_credentials_request",
    "raise_for_alter",
    "scram_mechanism_name",
    "user_scram_credentials_from",
]

# Kafka's ScramMechanism numbering on the wire (0 is UNKNOWN).
SCRAM_MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
# What kafka-configs and Kafka's admin client use when no count is given; the least Kafka accepts.
DEFAULT_ITERATIONS = ITERATIONS_MIN


def scram_mechanism_code(name: str) -> int:
    code = SCRAM_MECHANISM_CODES.get(name.upper())
    if code is None:
        raise ValueError(f"unknown SCRAM mechanism {name!r} (one of {', '.join(SCRAM_MECHANISM_CODES)})")
    return code


def scram_mechanism_name(code: int) -> str:
    for name, known in SCRAM_MECHANISM_CODES.items():
        if known == code:
            return name
    return f"UNKNOWN({code})"


@dataclass(frozen=True)
class ScramCredentialInfo:
    """One credential of a user, as DescribeUserScramCredentials tells it (never the keys)."""

    mechanism: str
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set (add or replace) ``user``'s credential for ``mechanism`` from ``password``."""

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS
    # None: random (SALT_BYTES). Given only by tests that need a known credential.
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


def describe_user_scram_credentials_request(
    users: Iterable[str] | None,
) -> DescribeUserScramCredentialsRequest:
    """``users`` None: every user with a credential."""
    if users is None:
        return DescribeUserScramCredentialsRequest(users=None)
    return DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequest.UserName(name=name) for name in dict.fromkeys(users)]
    )


def user_scram_credentials_from(
    response: DescribeUserScramCredentialsResponse,
) -> dict[str, list[ScramCredentialInfo]]:
    """User -> credentials. A user named in the request that has none (RESOURCE_NOT_FOUND) maps to
    an empty list; any other error raises."""
    if response.error_code != ErrorCode.NONE:
        raise error_for_code(
            response.error_code, response.error_message, context="describe SCRAM credentials"
        )
    described: dict[str, list[ScramCredentialInfo]] = {}
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            described[result.user] = []
            continue
        if result.error_code != ErrorCode.NONE:
            raise error_for_code(
                result.error_code,
                result.error_message,
                context=f"describe SCRAM credentials of {result.user!r}",
            )
        described[result.user] = sorted(
            (
                ScramCredentialInfo(scram_mechanism_name(info.mechanism), info.iterations)
                for info in result.credential_infos
            ),
            key=lambda info: info.mechanism,
        )
    return described


def alter_user_scram_credentials_request(
    alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> AlterUserScramCredentialsRequest:
    """The request, with each upsertion's password salted here (ValueError for a mechanism or an
    iteration count Kafka does not take, before the slow hash runs)."""
    request = AlterUserScramCredentialsRequest(deletions=[], upsertions=[])
    for alteration in alterations:
        if not alteration.user:
            raise ValueError("a SCRAM credential needs a user name")
        code = scram_mechanism_code(alteration.mechanism)
        mechanism = scram_mechanism_name(code)
        if isinstance(alteration, UserScramCredentialDeletion):
            request.deletions.append(
                AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=alteration.user, mechanism=code)
            )
            continue
        if not ITERATIONS_MIN <= alteration.iterations <= ITERATIONS_MAX:
            raise ValueError(
                f"iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX} (Kafka's bounds), not {alteration.iterations}"
            )
        salt = alteration.salt if alteration.salt is not None else random_bytes(SALT_BYTES)
        request.upsertions.append(
            AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=alteration.user,
                mechanism=code,
                iterations=alteration.iterations,
                salt=salt,
                salted_password=salted_password(mechanism, alteration.password, salt, alteration.iterations),
            )
        )
    return request


def raise_for_alter(response: AlterUserScramCredentialsResponse, users: Iterable[str]) -> None:
    """Raise the first user's error (the broker answers each user once, for all its changes)."""
    answered = {result.user for result in response.results}
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            raise error_for_code(
                result.error_code, result.error_message, context=f"alter SCRAM credentials of {result.user!r}"
            )
    missing = sorted(set(users) - answered)
    if missing:
        raise ProtocolError(
            f"alter SCRAM credentials: the broker did not answer for {', '.join(map(repr, missing))}"
        )
