"""A throwaway CA with a server and a client certificate, for the TLS tests."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(subject: str, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
           usage: ExtendedKeyUsageOID | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject)).issuer_name(issuer).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("mainstem test CA", ca_key, _name("mainstem test CA"), ca_key, ca=True)
    paths = Certificates(*(directory / name for name in (
        "ca.pem", "server.pem", "server.key", "client.pem", "client.key")))
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    for subject, usage, cert_path, key_path in (
        ("localhost", ExtendedKeyUsageOID.SERVER_AUTH, paths.server_cert, paths.server_key),
        ("test-client", ExtendedKeyUsageOID.CLIENT_AUTH, paths.client_cert, paths.client_key),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(subject, key, ca_cert.subject, ca_key, usage=usage)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
    return paths
