"""TLS settings that need real certificates: an encrypted key with ssl.key.password, the keystore
given inline, per-listener client authentication."""

from __future__ import annotations

import ssl
import subprocess
import tempfile
from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.broker.listener_security import ssl_context
from tests.security.certs import Certificates


def encrypted_keystore(certificates: Certificates, directory: Path, password: str) -> Path:
    key = directory / "broker-encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(certificates.broker_key), "-aes256", "-passout", f"pass:{password}",
         "-out", str(key)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    keystore = directory / "broker-encrypted-keystore.pem"
    keystore.write_text(certificates.broker_certificate.read_text() + key.read_text())
    return keystore


def test_an_encrypted_key_needs_the_right_password(tmp_path: Path, certificates: Certificates) -> None:
    keystore = encrypted_keystore(certificates, tmp_path, "key-secret")
    values = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore)}
    good = BrokerConfig(data_dir=tmp_path, values=values | {"ssl.key.password": "key-secret"})
    assert ssl_context(good, "SSL").verify_mode == ssl.CERT_NONE
    wrong = BrokerConfig(data_dir=tmp_path, values=values | {"ssl.key.password": "nope"})
    with pytest.raises(BrokerConfigError, match=r"ssl\.key\.password is wrong"):
        ssl_context(wrong, "SSL")


def test_an_inline_keystore_and_truststore(tmp_path: Path, certificates: Certificates) -> None:
    values = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.certificate.chain": certificates.broker_certificate.read_text(),
        "ssl.keystore.key": certificates.broker_key.read_text(),
        "ssl.truststore.certificates": certificates.ca.read_text(),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.enabled.protocols": "TLSv1.3",
    }
    context = ssl_context(BrokerConfig(data_dir=tmp_path, values=values), "SSL")
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert not list(
        Path(tempfile.gettempdir()).glob("strom-keystore-*")
    )  # the temporary copy of the key is gone


def test_client_authentication_needs_a_truststore(tmp_path: Path, certificates: Certificates) -> None:
    values = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(certificates.broker_keystore),
        "ssl.client.auth": "requested",
    }
    with pytest.raises(BrokerConfigError, match=r"needs ssl\.truststore\.location"):
        ssl_context(BrokerConfig(data_dir=tmp_path, values=values), "SSL")


def test_tls_versions_strom_does_not_offer_are_left_out(tmp_path: Path, certificates: Certificates) -> None:
    """An older Kafka's ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1 gives a context of TLSv1.2 alone."""
    keystore = tmp_path / "keystore.pem"
    keystore.write_text(certificates.broker_certificate.read_text() + certificates.broker_key.read_text())
    values = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(keystore),
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.1,TLSv1",
    }
    context = ssl_context(BrokerConfig(data_dir=tmp_path, values=values), "SSL")
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_2,
    )
