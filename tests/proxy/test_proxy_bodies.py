"""Bodies through the proxy's own HTTP/1.1 client: a download read straight off
the socket, HEAD and chunked responses framed by h11, keep-alive reuse, a
connection the service closed while it idled, and a response that breaks off.
A real server in front (uvicorn) and the standard library's HTTP/1.1 server
behind, whose handler does what each case needs; the fake runtime leads the
instance's port to it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions, published
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory
from tests.web.browser import serve

MIB = 1 << 20
PATTERN = bytes(range(256)) * 4096  # 1 MiB in which a lost or repeated piece shows


def pattern(size: int) -> bytes:
    return (PATTERN * (size // len(PATTERN) + 1))[:size]


class Service(http.server.BaseHTTPRequestHandler):
    """/big?n=N (GET and HEAD), /chunked?n=N, /peer (the client's port),
    /upload (the body's length), /short (announces more than it sends),
    /closing (closes the connection after answering, without saying so),
    /then-drop (answers; the next request on that connection gets no answer)."""

    protocol_version = "HTTP/1.1"
    server: ServiceServer

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_POST(self) -> None:
        received = 0
        if self.headers.get("transfer-encoding") == "chunked":
            while size := int(self.rfile.readline().strip(), 16):
                received += len(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
        else:
            received = len(self.rfile.read(int(self.headers["content-length"])))
        self._send(str(received).encode())

    def _answer(self, head: bool) -> None:
        if getattr(self, "drop_next", False):
            self.close_connection = True
            return
        url = urlsplit(self.path)
        size = int(parse_qs(url.query).get("n", ["0"])[0])
        if url.path == "/big":
            self._send(pattern(size), head=head)
        elif url.path == "/chunked":
            self._chunked(pattern(size))
        elif url.path == "/peer":
            self._send(str(self.client_address[1]).encode())
        elif url.path == "/short":
            self.send_response(200)
            self.send_header("content-length", str(2 * MIB))
            self.end_headers()
            self.wfile.write(pattern(MIB))
            self.close_connection = True
        elif url.path == "/then-drop":  # answers, then drops the next request unanswered
            self._send(b"first")
            self.drop_next = True
        elif url.path == "/closing":
            self._send(b"bye")
            self.close_connection = True
        else:
            self.send_error(404)

    def _send(self, body: bytes, head: bool = False) -> None:
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _chunked(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 300_000):
            piece = body[start : start + 300_000]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


class ServiceServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Service)
        self.closed = threading.Event()  # set when the server closed a connection

    def shutdown_request(self, request: object) -> None:
        super().shutdown_request(request)  # type: ignore[arg-type]
        self.closed.set()


@dataclass
class Stage:
    browser: httpx.Client
    service: ServiceServer


@pytest.fixture
def stage(platform_factory: PlatformFactory) -> Iterator[Stage]:
    runtime = FakeRuntime()
    platform = platform_factory(runtime=runtime, service_auth_cache_s=0)
    alice = users.create_user(platform.ctx, "alice").user
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="dl", services=(("app", 8000),))
    created = actions.create_instance(platform.ctx, alice, request)
    container = _run(platform, created.id)
    link = published.create_link(platform.ctx, alice, created.id, "app", ttl=timedelta(hours=1))
    service = ServiceServer()
    threading.Thread(target=service.serve_forever, daemon=True).start()
    runtime.serve_port(container, 8000, service.server_address[:2])  # type: ignore[arg-type]
    try:
        with serve(platform) as url:
            base = f"{url}/i/{created.id}/app"
            with httpx.Client(base_url=base, cookies={"gpudock_link": link}) as browser:
                yield Stage(browser, service)
    finally:
        service.shutdown()
        service.server_close()


def _run(platform: Platform, instance_id: str) -> str:
    for _ in range(20):
        platform.reconciler.drain()
        with platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            if found is not None and found.status == InstanceStatus.RUNNING:
                assert found.container_id is not None
                return found.container_id
    raise AssertionError(f"{instance_id} never ran")


def test_a_download_arrives_whole_and_small_requests_share_a_connection(stage: Stage) -> None:
    peers = {stage.browser.get("/peer").text for _ in range(3)}
    assert len(peers) == 1  # pooled: one connection into the instance

    size = 3 * MIB + 7  # read off the socket, past what came with the head
    got = stage.browser.get(f"/big?n={size}")
    assert got.status_code == 200 and got.headers["content-length"] == str(size)
    assert got.content == pattern(size)

    head = stage.browser.head(f"/big?n={size}")
    assert head.headers["content-length"] == str(size) and head.content == b""
    after_head = stage.browser.get("/peer").text
    assert stage.browser.get("/peer").text == after_head  # a HEAD leaves it reusable


def test_chunked_bodies_pass_both_ways(stage: Stage) -> None:
    got = stage.browser.get(f"/chunked?n={2 * MIB + 3}")
    assert got.content == pattern(2 * MIB + 3)
    assert "transfer-encoding" in got.headers  # framed again by the ASGI server

    def upload() -> Iterator[bytes]:
        for _ in range(5):
            yield pattern(200_000)

    sent = stage.browser.post("/upload", content=upload())  # no length: chunked
    assert sent.text == str(5 * 200_000)


def test_a_connection_the_service_closed_while_idle_is_not_reused(stage: Stage) -> None:
    stage.service.closed.clear()
    assert stage.browser.get("/closing").text == "bye"
    assert stage.service.closed.wait(10)
    assert stage.browser.get("/peer").status_code == 200


def test_a_response_that_breaks_off_breaks_off_for_the_browser(stage: Stage) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        stage.browser.get("/short")
    assert stage.browser.get(f"/big?n={MIB}").content == pattern(MIB)


def test_a_request_the_service_drops_on_a_pooled_connection_goes_again_on_a_new_one(
    stage: Stage,
) -> None:
    first = stage.browser.get("/then-drop")
    assert first.text == "first"
    again = stage.browser.get("/peer")  # the pooled connection is dropped under it
    assert again.status_code == 200, again.text
