"""One HTTP/1.1 request and its response on a connection into an instance.

h11 (the state machine under httpcore and httpx) writes the request and
parses the response's head, and frames every body it can see the end of:
chunked, close-delimited, and Content-Length bodies under `DIRECT_MIN_BYTES`.
A larger Content-Length body (a download, a big notebook bundle) is read
straight off the socket once h11 has the head: h11 copies each byte into its
receive buffer and out again, which was a fifth of the proxy's time per
downloaded byte, and the bytes of a read can go to the ASGI server as they are.
h11 then believes the body is still coming, so such a connection is closed
afterwards rather than pooled; a download pays one new connection, the many
small requests of a page share the pooled ones.

Every read and write has the idle timeout: a response that goes silent for
that long fails, one that keeps moving is never cut.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterable, AsyncIterator

import h11

# A read takes whatever has arrived, up to this: each read is a turn through
# the event loop and the ASGI server, so fewer, larger reads cost less per byte.
READ_SIZE = 1 << 20
DIRECT_MIN_BYTES = 1 << 20
MAX_HEAD_BYTES = 100 * 1024  # as httpcore: Jupyter's cookies make long heads
NO_BODY_STATUSES = frozenset({204, 304})


class UpstreamFailure(Exception):
    """The instance's side failed: refused, reset, silent past the timeout,
    closed early, or spoke something other than HTTP/1.1."""


class PortConnection:
    """A connected non-blocking socket and the HTTP/1.1 state on it."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        self.sock = sock
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)

    def close(self) -> None:
        self.sock.close()

    def still_open(self) -> bool:
        """False when the instance closed (or wrote to) the idle connection:
        reusing it would lose the next request."""
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # b"": closed; bytes while idle: not HTTP
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    async def exchange(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes],
    ) -> UpstreamResponse:
        """Send the request (its body to the end), then read the response's head."""
        try:
            await self._send(h11.Request(method=method, target=target, headers=headers))
            async for chunk in body:
                await self._send(h11.Data(data=chunk))
            await self._send(h11.EndOfMessage())
            while True:
                event = await self._next_event()
                if isinstance(event, h11.Response):
                    return UpstreamResponse(self, method, event)
                if not isinstance(event, h11.InformationalResponse):  # 100 Continue: go on
                    raise UpstreamFailure(f"the instance answered {type(event).__name__}")
        except h11.LocalProtocolError as exc:
            raise UpstreamFailure(f"the request cannot be passed on as HTTP/1.1: {exc}") from exc
        except h11.RemoteProtocolError as exc:
            raise UpstreamFailure(f"not an HTTP/1.1 answer: {exc}") from exc

    def next_cycle(self) -> bool:
        """Ready the connection for another request: True if both sides finished
        their message and neither asked to close."""
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            return True
        return False

    def buffered(self) -> bytes:
        """What arrived after the parts h11 has parsed (body bytes that came
        with the head)."""
        data, _closed = self._h11.trailing_data
        return data

    async def recv(self, size: int) -> bytes:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._loop.sock_recv(self.sock, size)
        except TimeoutError as exc:
            raise UpstreamFailure(f"nothing from the instance for {self._timeout_s:g} s") from exc
        except OSError as exc:
            raise UpstreamFailure(str(exc) or type(exc).__name__) from exc

    def parse_arrived(self) -> tuple[list[bytes], bool]:
        """The body's pieces in what has arrived (no I/O), and whether its end was among them."""
        pieces = []
        try:
            while True:
                event = self._h11.next_event()
                if isinstance(event, h11.Data):
                    pieces.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return pieces, True
                elif event is h11.NEED_DATA:
                    return pieces, False
                else:
                    raise UpstreamFailure(f"the response broke off ({event!r})")
        except h11.ProtocolError as exc:
            raise UpstreamFailure(f"the response broke off: {exc}") from exc

    async def receive_more(self) -> None:
        self._h11.receive_data(await self.recv(READ_SIZE))  # b"": the instance closed

    async def _next_event(self) -> h11.Event:
        while True:
            event = self._h11.next_event()
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:  # h11 holds what follows a finished response
                raise UpstreamFailure("the instance sent more than it was asked for")
            self._h11.receive_data(await self.recv(READ_SIZE))  # b"": the instance closed

    async def _send(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if not data:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._loop.sock_sendall(self.sock, data)
        except TimeoutError as exc:
            raise UpstreamFailure(f"the instance took nothing for {self._timeout_s:g} s") from exc
        except OSError as exc:
            raise UpstreamFailure(str(exc) or type(exc).__name__) from exc


class UpstreamResponse:
    """A response whose head has arrived; `body()` streams the rest once."""

    def __init__(self, connection: PortConnection, method: str, head: h11.Response) -> None:
        self.status: int = head.status_code
        self.headers: list[tuple[bytes, bytes]] = list(head.headers.raw_items())
        self._connection = connection
        self._direct_length = _direct_length(method, head)
        self._pending: list[bytes] = []
        self._finished = False

    def reusable(self) -> bool:
        """The connection can carry another request (the body was read to its end by h11)."""
        return self._finished and self._direct_length is None and self._connection.next_cycle()

    def arrived_whole(self) -> bytes | None:
        """The whole body if it came with the head, so that it can go on at
        once (most of a page's requests); else None, and `body()` streams it."""
        if self._direct_length is not None:
            return None
        self._pending, self._finished = self._connection.parse_arrived()
        return b"".join(self._pending) if self._finished else None

    async def body(self) -> AsyncIterator[bytes]:
        if self._direct_length is not None:
            async for chunk in self._read_direct(self._direct_length):
                yield chunk
            self._finished = True
            return
        if self._pending:
            yield b"".join(self._pending)
            self._pending = []
        while not self._finished:
            await self._connection.receive_more()
            pieces, self._finished = self._connection.parse_arrived()
            if pieces:  # all that one read brought, at once
                yield b"".join(pieces)

    async def _read_direct(self, length: int) -> AsyncIterator[bytes]:
        first = self._connection.buffered()[:length]
        if first:
            yield first
        remaining = length - len(first)
        while remaining:
            chunk = await self._connection.recv(min(remaining, READ_SIZE))
            if not chunk:
                raise UpstreamFailure(
                    f"the instance closed the connection {remaining} bytes short "
                    f"of the {length} its Content-Length announced"
                )
            remaining -= len(chunk)
            yield chunk


def _direct_length(method: str, head: h11.Response) -> int | None:
    """The Content-Length to read off the socket, or None where h11 frames the body."""
    if method == "HEAD" or head.status_code in NO_BODY_STATUSES:
        return None
    lengths = set()
    for name, value in head.headers:
        if name == b"transfer-encoding":
            return None  # chunked wins over a length, as h11 has it
        if name == b"content-length":
            lengths.add(value)
    if len(lengths) != 1:
        return None
    length = int(lengths.pop())  # h11 checked it is digits
    return length if length >= DIRECT_MIN_BYTES else None
