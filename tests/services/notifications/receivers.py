"""Real receivers on 127.0.0.1, port 0: an HTTP server that records what it is
sent and answers with the status codes a test scripts, and an SMTP server
(aiosmtpd) that keeps the messages it accepts."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    url: str
    answers: list[int] = field(default_factory=list)  # popped per request; then 204
    received: list[Received] = field(default_factory=list)


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            status = receiver.answers.pop(0) if receiver.answers else 204
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class MailReceiver:
    port: int
    messages: list[Message] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)


class _Keep:
    def __init__(self, receiver: MailReceiver) -> None:
        self._receiver = receiver

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self._receiver.messages.append(message_from_bytes(envelope.original_content))
        self._receiver.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


def _free_port() -> int:
    """aiosmtpd's controller connects to its own port to see it listening, so
    it cannot take port 0: ask the kernel for a free one first."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def smtp_receiver() -> Iterator[MailReceiver]:
    receiver = MailReceiver(port=_free_port())
    controller = Controller(_Keep(receiver), hostname="127.0.0.1", port=receiver.port)
    controller.start()
    try:
        yield receiver
    finally:
        controller.stop()
