"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), both ends, as pure state machines.

The server keeps only salted credentials: the salt, the iteration count, ``StoredKey = H(ClientKey)``
and ``ServerKey`` — never the password. Kafka writes a credential as
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``; so does strom.

An exchange, as bytes that SaslAuthenticate carries:

    client-first   n,,n=alice,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<ClientProof>
    server-final   v=<ServerSignature>

Channel binding is not offered (the gs2 header is ``n`` or ``y``); an authorization id, when
given, must name the user authenticating; ``tokenauth`` (delegation tokens) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's bounds on the iteration count of a stored credential.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
SALT_BYTES = 32
NONCE_BYTES = 24
# A SCRAM message is a few hundred bytes; anything longer is not one.
MESSAGE_BYTES_MAX = 4096


class ScramError(Exception):
    """The exchange failed; the message is safe to send to the peer (it never says which check)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def _hash_name(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r} (strom has {', '.join(MECHANISMS)})"
        ) from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hash_name)


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape_name(text: str) -> str:
    if "=" in text.replace("=3D", "").replace("=2C", ""):
        raise ScramError("the user name has a bad escape")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``a=value,b=value`` as pairs, in order."""
    pairs = []
    for part in message.split(","):
        key, separator, value = part.partition("=")
        if not separator or not key:
            raise ScramError(f"malformed {what}")
        pairs.append((key, value))
    return pairs


def _decode(message: bytes, what: str) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError(f"{what} is too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, salt: bytes | None = None, iterations: int = ITERATIONS_MIN
    ) -> ScramCredential:
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise ValueError(f"iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX}, not {iterations}")
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
        )

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salted: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        """AlterUserScramCredentials sends the salted password, never the password itself."""
        hash_name = _hash_name(mechanism)
        client_key = _hmac(hash_name, salted, b"Client Key")
        return cls(
            salt=salt,
            stored_key=hashlib.new(hash_name, client_key).digest(),
            server_key=_hmac(hash_name, salted, b"Server Key"),
            iterations=iterations,
        )

    def to_text(self) -> str:
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """The form ``to_text`` writes (Kafka's); raises ValueError for anything else."""
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as error:
            raise ValueError(f"not a SCRAM credential: {error}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)`` of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def _nonce() -> str:
    return _b64(os.urandom(NONCE_BYTES))


class ScramServer:
    """One server side of one exchange: ``first`` then ``final``; ``username`` once it succeeded.
    ``credentials(name)`` looks the user up (None: unknown user, told apart from a wrong password
    only in the server's own log)."""

    def __init__(
        self,
        mechanism: str,
        credentials: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] = _nonce,
    ) -> None:
        self.mechanism = mechanism
        self._hash_name = _hash_name(mechanism)
        self._credentials = credentials
        self._make_nonce = nonce
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""
        self.requested_name = ""
        self.username: str | None = None
        self.failure: str | None = None  # why it failed, for the server's log only

    def first(self, client_first: bytes) -> bytes:
        """The server-first message; ScramError when the client's message is malformed or the user unknown."""
        text = _decode(client_first, "client-first message")
        flag, comma, rest = text.partition(",")
        authzid, comma2, bare = rest.partition(",")
        if not comma or not comma2 or flag not in ("n", "y"):
            raise ScramError("malformed client-first message (channel binding is not supported)")
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed client-first message")
        pairs = _attributes(bare, "client-first message")
        if len(pairs) < 2 or pairs[0][0] != "n" or pairs[1][0] != "r" or not pairs[1][1]:
            raise ScramError("malformed client-first message")
        name = _unescape_name(pairs[0][1])
        if authzid and _unescape_name(authzid[2:]) != name:
            raise ScramError("the authorization id is not the user authenticating")
        if any(key == "tokenauth" for key, _ in pairs[2:]):
            raise ScramError("delegation tokens are not supported")
        self.requested_name = name
        credential = self._credentials(name)
        if credential is None:
            self.failure = f"unknown user {name!r}"
            raise ScramError("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = pairs[1][1] + self._make_nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        """The server-final message; ScramError for a wrong nonce, channel binding or proof."""
        credential = self._credential
        if credential is None:
            raise ScramError("the client-final message came before the client-first message")
        text = _decode(client_final, "client-final message")
        without_proof, _, proof_part = text.rpartition(",p=")
        pairs = _attributes(without_proof, "client-final message") if without_proof else []
        if len(pairs) < 2 or pairs[0][0] != "c" or pairs[1][0] != "r" or not proof_part:
            raise ScramError("malformed client-final message")
        if _unb64(pairs[0][1], "channel binding") != self._gs2_header.encode("utf-8"):
            self.failure = "channel binding differs from the client-first message's"
            raise ScramError("Authentication failed: Invalid channel binding")
        # As lenient as Kafka's server (it checks endsWith): librdkafka sends its own nonce again
        # before the combined one. The proof still covers the message exactly as the client sent it.
        if not pairs[1][1].endswith(self._nonce):
            self.failure = "the nonce is not the one the server sent"
            raise ScramError("Authentication failed: Invalid nonce")
        proof = _unb64(proof_part, "client proof")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash_name, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            self.failure = "the proof has the wrong length"
            raise ScramError("Authentication failed: Invalid user credentials")
        client_key = _xor(proof, client_signature)
        if not hmac.compare_digest(hashlib.new(self._hash_name, client_key).digest(), credential.stored_key):
            self.failure = f"wrong password for {self.requested_name!r}"
            raise ScramError("Authentication failed: Invalid user credentials")
        self.username = self.requested_name
        server_signature = _hmac(self._hash_name, credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode("ascii")


class ScramClient:
    """One client side of one exchange: ``first``, ``final(server_first)``, ``verify(server_final)``."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: Callable[[], str] = _nonce
    ) -> None:
        self.mechanism = mechanism
        self._hash_name = _hash_name(mechanism)
        self._password = password
        self._bare = f"n={_escape_name(username)},r={nonce()}"
        self._client_nonce = self._bare.rpartition(",r=")[2]
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _decode(server_first, "server-first message")
        fields = dict(_attributes(text, "server-first message"))
        if "e" in fields:
            raise ScramError(f"the server refused: {fields['e']}")
        try:
            nonce, salt, iterations = fields["r"], _unb64(fields["s"], "salt"), int(fields["i"])
        except (KeyError, ValueError):
            raise ScramError("malformed server-first message") from None
        if not nonce.startswith(self._client_nonce) or nonce == self._client_nonce:
            raise ScramError("the server's nonce does not extend the client's")
        if not 1 <= iterations <= ITERATIONS_MAX * 16:
            raise ScramError(f"implausible iteration count {iterations}")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode()
        self._salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self._hash_name, self._salted, b"Client Key")
        stored_key = hashlib.new(self._hash_name, client_key).digest()
        proof = _xor(client_key, _hmac(self._hash_name, stored_key, self._auth_message))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        """Raises ScramError unless the server proved it knows the credential."""
        fields = dict(_attributes(_decode(server_final, "server-final message"), "server-final message"))
        if "e" in fields:
            raise ScramError(f"the server refused: {fields['e']}")
        server_key = _hmac(self._hash_name, self._salted, b"Server Key")
        expected = _hmac(self._hash_name, server_key, self._auth_message)
        if not hmac.compare_digest(_unb64(fields.get("v", ""), "server signature"), expected):
            raise ScramError("the server's signature is wrong")
