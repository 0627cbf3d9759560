"""Build uploads: the size limit is enforced while reading, the body goes to disk,
and a big upload neither fills the server's memory nor stalls its other requests.

Against a real `gpudock server` process (uvicorn, the fake runtime): only a real
event loop shows whether one request blocks the others.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_process import ServerProcess

LIMIT_MB = 64
CHUNK = b"\0" * 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("uploads"),
        "1x2xA100-80GB",
        env={
            "GPUDOCK_RUNTIME": "fake",
            "GPUDOCK_BUILD_CONTEXT_MAX_MB": str(LIMIT_MB),
            "GPUDOCK_RATE_LIMITS_ENABLED": "false",
        },
    )
    server.start()
    try:
        yield server
    finally:
        server.kill()


def rss_bytes(server: ServerProcess) -> int:
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def build_url(server: ServerProcess) -> str:
    return f"{server.url}/api/v1/images/build?name=big"


def test_a_declared_length_over_the_limit_is_a_413_at_once(server: ServerProcess) -> None:
    """Answered from the headers: the client never has to send the body."""
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/api/v1/images/build?name=big")
    conn.putheader("Authorization", f"Bearer {server.admin_token()}")
    conn.putheader("Content-Type", "application/x-tar")
    conn.putheader("Content-Length", str((LIMIT_MB + 1) * 2**20))
    conn.endheaders()  # and no body
    answer = conn.getresponse()
    reply = answer.read().decode()
    conn.close()
    assert answer.status == 413, reply
    assert f"over the {LIMIT_MB} MiB limit" in reply


def test_a_streamed_body_over_the_limit_is_a_413_and_memory_stays_flat(
    server: ServerProcess,
) -> None:
    before = rss_bytes(server)

    def body() -> Iterator[bytes]:
        for _ in range(3 * LIMIT_MB):  # no Content-Length: chunked, counted as it comes
            yield CHUNK

    try:
        answer = httpx.post(
            build_url(server),
            content=body(),
            headers={"Authorization": f"Bearer {server.admin_token()}"},
            timeout=60,
        )
        assert answer.status_code == 413, answer.text
    except httpx.RemoteProtocolError:
        pass  # the server may close the connection while the client still sends
    grown = rss_bytes(server) - before
    assert grown < LIMIT_MB * 2**20, f"the server grew by {grown / 2**20:.0f} MiB"


def test_other_requests_are_answered_while_an_upload_is_in_flight(
    server: ServerProcess,
) -> None:
    halfway, release = threading.Event(), threading.Event()

    def body() -> Iterator[bytes]:
        for n in range(LIMIT_MB // 2):
            if n == LIMIT_MB // 4:
                halfway.set()
                release.wait(60)
            yield CHUNK

    results: list[int] = []

    def upload() -> None:
        answer = httpx.post(
            build_url(server),
            content=body(),
            headers={"Authorization": f"Bearer {server.admin_token()}"},
            timeout=120,
        )
        results.append(answer.status_code)

    sender = threading.Thread(target=upload)
    sender.start()
    try:
        assert halfway.wait(60)
        answered = httpx.get(f"{server.url}/healthz", timeout=10)
        assert answered.status_code == 200
    finally:
        release.set()
        sender.join(120)
    # Zero bytes of a tar: a body that is not an archive is a 422, not a hang.
    assert results == [422]
