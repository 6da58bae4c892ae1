"""A certificate authority and serving certificates for the fake clusters (F26).

One CA per process is enough (F26 allows sharing); each cluster gets its own serving certificate
with subject alternative names for ``127.0.0.1``, ``localhost`` and any extra host names. Keys are
ECDSA P-256: quick to generate and accepted by Go (kubectl) and Python clients alike.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA: PEM certificate and key."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class ServingCertificate:
    """A serving certificate signed by the CA, with its key and the CA certificate."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        """An ``SSLContext`` for the HTTPS listener."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        # The ssl module loads certificates only from files.
        with tempfile.TemporaryDirectory(prefix="fakeapi-tls-") as tmp:
            cert = Path(tmp) / "tls.crt"
            key = Path(tmp) / "tls.key"
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            key.chmod(0o600)
            context.load_cert_chain(cert, key)
        return context


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def new_ca(common_name: str = "multikueue-dispatcher-sandbox-ca") -> CertificateAuthority:
    """Generate a fresh self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


@functools.cache
def process_ca() -> CertificateAuthority:
    """The CA shared by every fake cluster of this process."""
    return new_ca()


def issue_serving_certificate(
    ca: CertificateAuthority, hosts: tuple[str, ...] = ()
) -> ServingCertificate:
    """A serving certificate for ``127.0.0.1``, ``::1``, ``localhost`` and ``hosts``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the sandbox CA key must be an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
        x509.DNSName("localhost"),
    ]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        cert.public_bytes(serialization.Encoding.PEM), _key_pem(key), ca.cert_pem
    )
