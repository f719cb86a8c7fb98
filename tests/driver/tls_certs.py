"""Certificates for the endpoint's TLS tests, generated with ``cryptography``."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def key_pem(key: Any, password: bytes | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return bytes(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8, encryption))


def cert_pem(subject: str, key: Any, issuer: tuple[str, Any] | None = None,
             ca: bool = False) -> bytes:
    """A PEM certificate for ``subject`` (valid for 127.0.0.1 and localhost unless a CA),
    signed by ``issuer`` (name, key) or by itself."""
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signing_key = issuer or (subject, key)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
    return bytes(builder.sign(signing_key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM))


def write_pki(directory: Path) -> dict[str, Path]:
    """PEM files in ``directory``: a CA (``ca``), the endpoint's ``key`` and ``cert``
    signed by it, an unrelated self-signed ``other`` with ``other_key``, the key
    encrypted (``encrypted_key``) and a file that is no PEM (``not_pem``)."""
    ca_key, key, other_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    files = {
        "ca": cert_pem("walstream test CA", ca_key, ca=True),
        "key": key_pem(key),
        "cert": cert_pem("driver", key, issuer=("walstream test CA", ca_key)),
        "other_key": key_pem(other_key),
        "other": cert_pem("someone else", other_key),
        "encrypted_key": key_pem(key, b"pw"),
        "not_pem": b"hello",
    }
    paths = {}
    for name, data in files.items():
        paths[name] = directory / f"{name}.pem"
        paths[name].write_bytes(data)
    return paths
