"""A remote Docker Engine over TLS (`DOCKER_HOST=tcp://…`, `DOCKER_TLS_VERIFY`,
`DOCKER_CERT_PATH`): a real second dockerd on 127.0.0.1 with a CA of the
test's own, reached while `REQUESTS_CA_BUNDLE` names the system's bundle, as it
does on these machines. requests used to put that bundle before the engine's CA
and refuse the engine's certificate."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpudock.errors import RuntimeUnavailable
from gpudock.runtime.docker.engine import connect
from tests.support.server_process import free_port

pytestmark = pytest.mark.docker
START_DEADLINE_S = 60.0
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def _pem(path: Path, thing: x509.Certificate | ec.EllipticCurvePrivateKey) -> None:
    if isinstance(thing, x509.Certificate):
        path.write_bytes(thing.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(
            thing.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    usage: ExtendedKeyUsageOID | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _certificates(directory: Path) -> None:
    """ca.pem; server-cert.pem and server-key.pem; cert.pem and key.pem (the client's)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    _pem(directory / "ca.pem", _certificate("test ca", ca_key, None, None))
    for prefix, usage in (
        ("server-", ExtendedKeyUsageOID.SERVER_AUTH),
        ("", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        _pem(directory / f"{prefix}key.pem", key)
        _pem(
            directory / f"{prefix}cert.pem",
            _certificate(prefix or "client", key, ("test ca", ca_key), usage),
        )


@pytest.fixture
def tls_engine(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A second dockerd answering only TLS with client certificates on 127.0.0.1."""
    certs = tmp_path / "certs"
    certs.mkdir()
    _certificates(certs)
    url = f"tcp://127.0.0.1:{free_port()}"
    tag = secrets.token_hex(3)
    exec_root = Path(f"/tmp/gdtls-{tag}")  # short: Unix socket paths
    # A bridge of its own: `--bridge=none` would have it delete the machine's docker0.
    bridge = f"gdtls{tag}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    subprocess.run(
        ["ip", "addr", "add", f"10.231.{secrets.randbelow(250) + 1}.1/24", "dev", bridge],
        check=True,
    )
    command = [
        "dockerd",
        f"--data-root={tmp_path / 'docker'}",
        f"--exec-root={exec_root}",
        f"--pidfile={exec_root / 'd.pid'}",
        f"--host={url}",
        "--tlsverify",
        f"--tlscacert={certs / 'ca.pem'}",
        f"--tlscert={certs / 'server-cert.pem'}",
        f"--tlskey={certs / 'server-key.pem'}",
        f"--bridge={bridge}",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
    ]
    with (tmp_path / "dockerd.log").open("wb") as log:
        dockerd = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield url, certs
    finally:
        dockerd.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            dockerd.wait(30)
        if dockerd.poll() is None:
            dockerd.kill()
            dockerd.wait()
        shutil.rmtree(exec_root, ignore_errors=True)
        subprocess.run(["ip", "link", "del", bridge], check=False)


def test_a_tls_engine_is_trusted_by_its_own_ca_whatever_requests_is_told(
    tls_engine: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, certs = tls_engine
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", SYSTEM_BUNDLE)  # knows nothing of the test's CA
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        try:
            client = connect(None, 10.0, 2)
            break
        except RuntimeUnavailable as exc:  # dockerd still starting (or the CA refused)
            if time.monotonic() > deadline:
                raise AssertionError(f"the TLS engine was not reached: {exc}") from exc
            time.sleep(0.2)
    try:
        assert client.ping() is True
        assert client.version()["ApiVersion"]
    finally:
        client.close()
