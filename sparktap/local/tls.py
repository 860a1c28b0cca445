"""A private certificate authority made at run time with the `openssl` command, for the local TLS services.

`make_ca(directory)` writes a CA (`ca.pem`, its key kept beside it) and `issue(ca, directory, name)` a server or
client certificate signed by it, valid for 127.0.0.1 and localhost, with an unencrypted PKCS#8 key (what Kafka's
PEM keystores and clickhouse-server's openSSL section read). Nothing here is for production: the keys are written
readable by the owner only, in a temp directory of the caller's.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparktap.errors import ServiceError

DAYS = "2"  # the certificates outlive any test run, and nothing else


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path  # ca.pem: the bundle clients trust
    key: Path


@dataclass(frozen=True)
class IssuedCertificate:
    cert: Path  # the certificate, PEM
    key: Path  # its private key, PEM (PKCS#8, unencrypted)
    ca: Path  # the CA bundle that signed it

    def keystore(self) -> Path:
        """Key and certificate in one PEM file (Kafka's `ssl.keystore.type=PEM`), written beside them."""
        path = self.cert.with_suffix(".keystore.pem")
        if not path.exists():
            path.write_text(self.key.read_text() + self.cert.read_text())
            path.chmod(0o600)
        return path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise ServiceError("cannot make a test certificate authority: no `openssl` on PATH; apt-get install openssl")
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    if done.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed with code {done.returncode}: {done.stderr.strip()[-400:]}")


def _new_key(path: Path, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path), cwd=cwd)
    path.chmod(0o600)


def make_ca(directory: Path, name: str = "sparktap test CA") -> CertificateAuthority:
    """A self-signed CA in `directory` (made if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory / "ca.pem", directory / "ca.key")
    _new_key(ca.key, directory)
    _openssl(
        "req", "-x509", "-new", "-key", str(ca.key), "-out", str(ca.cert), "-days", DAYS, "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return ca


def issue(
    ca: CertificateAuthority, directory: Path, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> IssuedCertificate:
    """A certificate for `name` signed by `ca`, valid for `hosts` (IP addresses and DNS names), for servers and
    clients alike."""
    directory.mkdir(parents=True, exist_ok=True)
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    _new_key(key, directory)
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}", cwd=directory)
    sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
        "-out", str(cert), "-days", DAYS, "-extfile", str(extensions),
        cwd=directory,
    )  # fmt: skip
    return IssuedCertificate(cert, key, ca.cert)
