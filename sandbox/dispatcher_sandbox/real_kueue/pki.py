"""Certificates and keys of the real control plane: one CA, one loopback serving certificate.

Every API server, every Kueue webhook server and Kueue's metrics server present the same
serving certificate (SANs ``127.0.0.1``, ``::1``, ``localhost``), signed by one CA whose
certificate goes into the kubeconfigs (``certificate-authority-data``) and into the webhook
configurations (``caBundle``). The service-account key pair signs the API servers' tokens (no
test uses service accounts, but kube-apiserver refuses to start without one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dispatcher_sandbox.fake_apiserver.tls import issue_serving_certificate, new_ca


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`make_pki` wrote."""

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    service_account_key: Path
    service_account_pub: Path

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate (PEM)."""
        return self.ca_cert.read_bytes()


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA, a loopback serving certificate (both from the fake API server's TLS
    helpers, :mod:`dispatcher_sandbox.fake_apiserver.tls`) and a service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca("multikueue-dispatcher real control plane CA")
    serving = issue_serving_certificate(ca)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        directory=directory,
        ca_cert=directory / "ca.crt",
        server_cert=directory / "tls.crt",
        server_key=directory / "tls.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(ca.cert_pem)
    pki.server_cert.write_bytes(serving.cert_pem)
    pki.server_key.write_bytes(serving.key_pem)
    pki.server_key.chmod(0o600)
    pki.service_account_key.write_bytes(
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pki.service_account_key.chmod(0o600)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
