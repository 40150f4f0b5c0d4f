"""SCRAM credentials of every user, and the rules of Describe/AlterUserScramCredentials.

``ScramCredentialStore`` is what the broker holds: a lookup for authentication and two operations
for the admin APIs. Where the credentials live is the store's business: a single node keeps them in
a JSON file of its data directory, a broker of a cluster in ZooKeeper the way Kafka keeps them
(``/config/users/<user>``: ``{"version":1,"config":{"SCRAM-SHA-512":
"salt=...,stored_key=...,server_key=...,iterations=4096"}}``); both in ``strom.broker.scram_store``.
``CredentialTable`` is the pure part both use: the table, the validation of an alteration with
Kafka's errors, and the per-user document in Kafka's form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from strom.security.scram import ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS, ScramCredential

# Kafka's ScramMechanism type codes on the wire.
MECHANISM_CODES: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TO_CODE = {name: code for code, name in MECHANISM_CODES.items()}
assert set(MECHANISM_TO_CODE) == set(MECHANISMS)
# Kafka's error codes (this package does not import the protocol's).
NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism_code: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism_code: int


@dataclass(frozen=True)
class UserResult:
    user: str
    error_code: int = NONE
    error_message: str | None = None


@dataclass(frozen=True)
class DescribedUser:
    user: str
    error_code: int = NONE
    error_message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism code, iterations)


class ScramCredentialStore(Protocol):
    """``credential`` and ``describe`` answer from memory (a login must not wait on storage);
    ``alter`` is a coroutine so that a store kept elsewhere (ZooKeeper) can write before it answers."""

    async def wait_loaded(self) -> None:
        """Returns once the store has been read (a login waits for it rather than fail)."""

    def credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def describe(self, users: list[str] | None) -> list[DescribedUser]: ...

    async def alter(self, upsertions: list[Upsertion], deletions: list[Deletion]) -> list[UserResult]: ...


class CredentialTable:
    """user -> mechanism -> credential, with Kafka's rules for describing and altering it."""

    def __init__(self, table: Mapping[str, Mapping[str, ScramCredential]] | None = None) -> None:
        self.users: dict[str, dict[str, ScramCredential]] = {
            user: dict(credentials) for user, credentials in (table or {}).items() if credentials
        }

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        credentials = self.users.get(user)
        return None if credentials is None else credentials.get(mechanism)

    def describe(self, users: list[str] | None) -> list[DescribedUser]:
        """Every user with credentials when ``users`` is None or empty, else the ones named."""
        if not users:
            return [self._described(user) for user in sorted(self.users)]
        results = []
        counts: dict[str, int] = {}
        for user in users:
            counts[user] = counts.get(user, 0) + 1
        for user in dict.fromkeys(users):
            if counts[user] > 1:
                results.append(
                    DescribedUser(
                        user,
                        DUPLICATE_RESOURCE,
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    )
                )
            elif user not in self.users:
                results.append(
                    DescribedUser(
                        user, RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist"
                    )
                )
            else:
                results.append(self._described(user))
        return results

    def _described(self, user: str) -> DescribedUser:
        return DescribedUser(
            user,
            credentials=tuple(
                (MECHANISM_TO_CODE[mechanism], credential.iterations)
                for mechanism, credential in sorted(self.users[user].items())
            ),
        )

    def alter(
        self, upsertions: list[Upsertion], deletions: list[Deletion]
    ) -> tuple[list[UserResult], set[str]]:
        """Apply what validates; the result of every user named (in order) and the users changed.
        A user with any invalid alteration gets that error and none of its alterations applied."""
        errors: dict[str, tuple[int, str]] = {}
        seen: dict[tuple[str, int], int] = {}
        order: list[str] = []
        items: list[Upsertion | Deletion] = [*deletions, *upsertions]
        for item in items:
            if item.user not in order:
                order.append(item.user)
            seen[(item.user, item.mechanism_code)] = seen.get((item.user, item.mechanism_code), 0) + 1

        def refuse(user: str, code: int, message: str) -> None:
            errors.setdefault(user, (code, message))

        for item in items:
            user = item.user
            if not user:
                refuse(user, UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif item.mechanism_code not in MECHANISM_CODES:
                refuse(user, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif seen[(user, item.mechanism_code)] > 1:
                refuse(
                    user, DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
                )
        for deletion in deletions:
            mechanism = MECHANISM_CODES.get(deletion.mechanism_code)
            if mechanism is not None and self.credential(deletion.user, mechanism) is None:
                refuse(
                    deletion.user,
                    RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
        for upsertion in upsertions:
            if upsertion.iterations < ITERATIONS_MIN:
                refuse(upsertion.user, UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {upsertion.iterations}")
            elif upsertion.iterations > ITERATIONS_MAX:
                refuse(
                    upsertion.user, UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {upsertion.iterations}"
                )
            elif not upsertion.salt or not upsertion.salted_password:
                refuse(
                    upsertion.user,
                    UNACCEPTABLE_CREDENTIAL,
                    "The salt and the salted password must not be empty",
                )
        changed: set[str] = set()
        for deletion in deletions:
            if deletion.user in errors:
                continue
            credentials = self.users[deletion.user]
            del credentials[MECHANISM_CODES[deletion.mechanism_code]]
            if not credentials:
                del self.users[deletion.user]
            changed.add(deletion.user)
        for upsertion in upsertions:
            if upsertion.user in errors:
                continue
            mechanism = MECHANISM_CODES[upsertion.mechanism_code]
            self.users.setdefault(upsertion.user, {})[mechanism] = ScramCredential.from_salted_password(
                mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
            )
            changed.add(upsertion.user)
        results = [UserResult(user, *errors[user]) if user in errors else UserResult(user) for user in order]
        return results, changed

    def set_password(
        self, user: str, mechanism: str, password: str, iterations: int = ITERATIONS_MIN
    ) -> None:
        """The bootstrap path (``strom broker --add-scram``): a credential made from a password."""
        self.users.setdefault(user, {})[mechanism] = ScramCredential.from_password(
            mechanism, password, iterations=iterations
        )

    # -- Kafka's per-user document ------------------------------------------------------------------

    def user_document(self, user: str) -> dict[str, object]:
        """``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,..."}}`` as Kafka keeps it per user."""
        return {
            "version": 1,
            "config": {
                mechanism: credential.to_text()
                for mechanism, credential in sorted(self.users.get(user, {}).items())
            },
        }

    def load_user_document(self, user: str, document: object) -> None:
        """Take a user's credentials from Kafka's per-user document (other config keys are ignored)."""
        config = document.get("config") if isinstance(document, dict) else None
        credentials: dict[str, ScramCredential] = {}
        if isinstance(config, dict):
            for mechanism, text in config.items():
                if mechanism in MECHANISMS and isinstance(text, str):
                    credentials[mechanism] = ScramCredential.parse(text)
        if credentials:
            self.users[user] = credentials
        else:
            self.users.pop(user, None)

    def documents(self) -> dict[str, dict[str, object]]:
        return {user: self.user_document(user) for user in sorted(self.users)}


class CredentialTableStore:
    """A store held in memory only (a broker's state before its server sets the real one, tests)."""

    def __init__(self, table: CredentialTable | None = None) -> None:
        self.table = table or CredentialTable()

    async def wait_loaded(self) -> None:
        """Always loaded."""

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.table.credential(user, mechanism)

    def describe(self, users: list[str] | None) -> list[DescribedUser]:
        return self.table.describe(users)

    async def alter(self, upsertions: list[Upsertion], deletions: list[Deletion]) -> list[UserResult]:
        return self.table.alter(upsertions, deletions)[0]


def parse_add_scram(text: str) -> tuple[str, str, str, int]:
    """``SCRAM-SHA-512=[name=admin,password=admin-secret(,iterations=8192)]`` (kafka-storage's
    --add-scram form): (mechanism, user, password, iterations); ValueError naming what is wrong."""
    mechanism, separator, rest = text.partition("=")
    mechanism = mechanism.strip().upper()
    if not separator or mechanism not in MECHANISMS:
        raise ValueError(f"--add-scram {text!r}: expected SCRAM-SHA-256=[...] or SCRAM-SHA-512=[...]")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise ValueError(f"--add-scram: the settings of {mechanism} go in brackets: [name=...,password=...]")
    fields: dict[str, str] = {}
    for part in _split_fields(rest[1:-1]):
        key, equals, value = part.partition("=")
        key = key.strip()
        value = value.strip()
        if not equals or key not in ("name", "password", "iterations"):
            raise ValueError(f"--add-scram: {key!r} is not name, password or iterations")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        fields[key] = value
    if not fields.get("name") or "password" not in fields:
        raise ValueError("--add-scram needs name=... and password=...")
    try:
        iterations = int(fields.get("iterations", ITERATIONS_MIN))
    except ValueError:
        raise ValueError("--add-scram: iterations must be a number") from None
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(f"--add-scram: iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX}")
    return mechanism, fields["name"], fields["password"], iterations


def _split_fields(text: str) -> Iterable[str]:
    """Split on commas outside double quotes."""
    part: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            yield "".join(part)
            part = []
        else:
            part.append(char)
    if part:
        yield "".join(part)
