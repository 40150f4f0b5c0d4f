"""A TLS client certificate's subject as Kafka's default principal builder names it: the
distinguished name in RFC 2253's string form (``CN=alice,OU=eng,O=strom``), as Java's
``X500Principal.getName()`` writes it.

Input is the ``subject`` of ``ssl.SSLSocket.getpeercert()``: a tuple of relative distinguished
names, most general first, each a tuple of ``(attribute name, value)``. RFC 2253 writes them most
specific first, joins the attributes of one RDN with ``+``, uses the short keywords it defines
(CN, L, ST, O, OU, C, STREET, DC, UID) and writes any other attribute as its OID with the value's
DER encoding in hex (``1.2.840.113549.1.9.1=#16...`` for an e-mail address).
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.security.principal import KafkaPrincipal

_KEYWORDS = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Attributes RFC 2253 has no keyword for, with their OID and the DER string type Java writes.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),  # IA5String
    "serialNumber": ("2.5.4.5", 0x13),  # PrintableString
    "title": ("2.5.4.12", 0x0C),
    "surname": ("2.5.4.4", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
}
_SPECIAL = set(',+"\\<>;')

Subject = Sequence[Sequence[tuple[str, str]]]


def escape_value(value: str) -> str:
    """RFC 2253 §2.4: a backslash before the special characters, a leading '#' or space and a trailing space."""
    out = []
    for index, char in enumerate(value):
        if char in _SPECIAL or (index == 0 and char in "# ") or (index == len(value) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(encoded)]) + encoded


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={escape_value(value)}"
    oid, tag = _OIDS.get(name, (name, 0x0C))
    encoded = value.encode("utf-8")
    return f"{oid}=#{bytes([tag]).hex()}{_der_length(len(encoded)).hex()}{encoded.hex()}"


def rfc2253_name(subject: Subject) -> str:
    return ",".join(
        "+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(list(subject))
    )


def certificate_principal(subject: Subject | None) -> KafkaPrincipal | None:
    """``User:<DN>`` of a verified peer certificate's subject; None without one."""
    if not subject:
        return None
    return KafkaPrincipal.user(rfc2253_name(subject))
