"""Kafka's principal: who a connection authenticated as, written ``Type:name`` (``User:alice``).

A connection that did not authenticate (a PLAINTEXT listener, or SSL without a client
certificate) is ``User:ANONYMOUS``, as in Kafka. ACLs, quotas and ``super.users`` name principals in
this form.
"""

from __future__ import annotations

from typing import NamedTuple

USER_TYPE = "User"


class KafkaPrincipal(NamedTuple):
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name``; raises ValueError without a type or a name (the name may hold colons)."""
        principal_type, separator, name = text.partition(":")
        if not separator or not principal_type or not name:
            raise ValueError(f"{text!r} is not a principal (Type:name, e.g. User:alice)")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")
