"""Test certificates made with ``openssl``: a CA, a broker certificate for 127.0.0.1 and localhost
(subjectAltName), and client certificates signed by the CA (and one signed by another CA)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

CLIENT_SUBJECT = "/O=strom/OU=eng/CN=alice"
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng,O=strom"


@dataclass(frozen=True)
class Certificates:
    directory: Path
    ca: Path  # the CA certificate (the truststore of both ends)
    broker_keystore: Path  # the broker's certificate and key in one PEM file
    broker_certificate: Path
    broker_key: Path
    client_certificate: Path
    client_key: Path
    client_keystore: Path
    rogue_certificate: Path  # signed by a CA the broker does not trust
    rogue_key: Path


def _openssl(*arguments: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(
    directory: Path, name: str, subject: str, ca: str, extensions: str | None = None
) -> tuple[Path, Path]:
    key, request, certificate = (
        directory / f"{name}.key",
        directory / f"{name}.csr",
        directory / f"{name}.pem",
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        key,
        "-subj",
        subject,
        "-out",
        request,
        cwd=directory,
    )
    arguments: list[str | Path] = [
        "x509", "-req", "-in", request, "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-days", "2", "-out", certificate, "-sha256",
    ]  # fmt: skip
    if extensions is not None:
        extension_file = directory / f"{name}.ext"
        extension_file.write_text(extensions)
        arguments += ["-extfile", extension_file]
    _openssl(*arguments, cwd=directory)
    return certificate, key


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "rogue-ca"):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", f"{ca}.key",
            "-out", f"{ca}.pem", "-subj", f"/O=strom tests/CN={ca}", cwd=directory,
        )  # fmt: skip
    broker_certificate, broker_key = _signed(
        directory,
        "broker",
        "/O=strom/CN=localhost",
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    client_certificate, client_key = _signed(
        directory, "client", CLIENT_SUBJECT, "ca", "extendedKeyUsage=clientAuth\n"
    )
    rogue_certificate, rogue_key = _signed(
        directory, "rogue", "/O=evil/CN=mallory", "rogue-ca", "extendedKeyUsage=clientAuth\n"
    )
    broker_keystore = directory / "broker-keystore.pem"
    broker_keystore.write_text(broker_certificate.read_text() + broker_key.read_text())
    client_keystore = directory / "client-keystore.pem"
    client_keystore.write_text(client_certificate.read_text() + client_key.read_text())
    return Certificates(
        directory=directory,
        ca=directory / "ca.pem",
        broker_keystore=broker_keystore,
        broker_certificate=broker_certificate,
        broker_key=broker_key,
        client_certificate=client_certificate,
        client_key=client_key,
        client_keystore=client_keystore,
        rogue_certificate=rogue_certificate,
        rogue_key=rogue_key,
    )
