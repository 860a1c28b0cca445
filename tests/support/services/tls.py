"""A private certificate authority for the local TLS services, made with trustme (no `openssl` process).

`make_ca(directory)` writes the CA's bundle (`ca.pem`; its key stays in memory, in the returned object) and
`issue(ca, directory, name)` a server or client certificate signed by it, valid for 127.0.0.1 and localhost, with an
unencrypted PKCS#8 key (what Kafka's PEM keystores and clickhouse-server's openSSL section read). Nothing here is
for production: the keys are written readable by the owner only, in a temp directory of the caller's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path  # ca.pem: the bundle clients trust
    authority: trustme.CA  # signs the certificates `issue` makes


@dataclass(frozen=True)
class IssuedCertificate:
    cert: Path  # the certificate, PEM
    key: Path  # its private key, PEM (PKCS#8, unencrypted)
    ca: Path  # the CA bundle that signed it

    def keystore(self) -> Path:
        """Key and certificate in one PEM file (Kafka's `ssl.keystore.type=PEM`), written beside them."""
        path = self.cert.with_suffix(".keystore.pem")
        if not path.exists():
            _write_private(path, self.key.read_bytes() + self.cert.read_bytes())
        return path


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to a file only its owner can read, from the moment it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def make_ca(directory: Path, name: str = "sparktap test CA") -> CertificateAuthority:
    """A self-signed CA (`name` its organization) with its bundle in `directory` (made if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = trustme.CA(organization_name=name)
    cert = directory / "ca.pem"
    authority.cert_pem.write_to_path(str(cert))
    return CertificateAuthority(cert, authority)


def issue(
    ca: CertificateAuthority, directory: Path, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> IssuedCertificate:
    """A certificate for `name` signed by `ca`, valid for `hosts` (IP addresses and DNS names), for servers and
    clients alike (trustme's leaves carry both extended key usages)."""
    directory.mkdir(parents=True, exist_ok=True)
    leaf = ca.authority.issue_cert(*hosts, common_name=name)
    # trustme writes the key in OpenSSL's traditional form (BEGIN EC PRIVATE KEY); Kafka's PEM keystore reads
    # PKCS#8 only
    private = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _write_private(
        key,
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    return IssuedCertificate(cert, key, ca.cert)
