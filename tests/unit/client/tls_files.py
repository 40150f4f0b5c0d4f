"""Test certificates made with the ``openssl`` command: a CA, a broker certificate for localhost
and 127.0.0.1, a broker certificate for another name, and a client certificate (whose key is also
written encrypted). EC P-256 keys: quick to make, and any TLS stack takes them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    broker_certificate: Path
    broker_key: Path
    # A broker certificate naming only broker.example (the host name check fails on 127.0.0.1).
    other_name_certificate: Path
    other_name_key: Path
    client_certificate: Path
    client_key: Path
    # client_key encrypted with KEY_PASSWORD.
    client_key_encrypted: Path
    # A CA that signed none of the above.
    unrelated_ca: Path


def _openssl(*arguments: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], cwd=cwd, check=True, capture_output=True)


def _new_key(directory: Path, name: str) -> Path:
    key = directory / f"{name}.key"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key, cwd=directory)
    return key


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key = _new_key(directory, name)
    certificate = directory / f"{name}.crt"
    _openssl(
        "req", "-x509", "-new", "-key", key, "-out", certificate, "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return certificate, key


def _signed(
    directory: Path, name: str, subject: str, alt_names: str, ca: tuple[Path, Path]
) -> tuple[Path, Path]:
    key = _new_key(directory, name)
    request = directory / f"{name}.csr"
    certificate = directory / f"{name}.crt"
    extensions = directory / f"{name}.ext"
    lines = [
        "basicConstraints=CA:FALSE",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid,issuer",
        "keyUsage=critical,digitalSignature,keyAgreement",
        "extendedKeyUsage=serverAuth,clientAuth",
    ]
    if alt_names:
        lines.append(f"subjectAltName={alt_names}")
    extensions.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", "-key", key, "-out", request, "-subj", subject, cwd=directory)
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-out", certificate, "-days", "2", "-extfile", extensions,
        cwd=directory,
    )  # fmt: skip
    return certificate, key


def make_tls_files(directory: Path) -> TlsFiles:
    ca = _ca(directory, "test-ca")
    unrelated_ca, _ = _ca(directory, "unrelated-ca")
    broker = _signed(directory, "broker", "/CN=localhost", "DNS:localhost,IP:127.0.0.1", ca)
    other = _signed(directory, "other", "/CN=broker.example", "DNS:broker.example", ca)
    client = _signed(directory, "client", "/CN=alice/OU=test/O=strom", "", ca)
    encrypted = directory / "client-encrypted.key"
    _openssl(
        "pkey", "-in", client[1], "-out", encrypted, "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
        cwd=directory,
    )  # fmt: skip
    return TlsFiles(
        ca=ca[0],
        broker_certificate=broker[0],
        broker_key=broker[1],
        other_name_certificate=other[0],
        other_name_key=other[1],
        client_certificate=client[0],
        client_key=client[1],
        client_key_encrypted=encrypted,
        unrelated_ca=unrelated_ca,
    )
