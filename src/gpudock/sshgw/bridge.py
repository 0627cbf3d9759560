"""Bytes between an SSH channel and a process in a container, with flow control.

The exec stream's socket is driven by the event loop (no thread per session):
output is decoded (stdout/stderr) and handed to the channel's side as it comes;
when the client is slow the socket is paused, and when the container is slow
the SSH channel is paused, so neither side buffers without bound. A stream
whose stderr comes on a socket of its own (`ExecStream.err_sock`) is read
through a second, read-only protocol (`_Stderr`); the output has ended once
both sockets have. A stream that offers its process without the sockets
(`ExecStream.direct`: an agent's link, relayed in this process) is attached
to instead (`DirectBridge`), with the same flow control.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from gpudock.services.ssh.sessions import STDERR, ExecStream, StreamPeer
from gpudock.services.ssh.sessions import StreamSink as Sink

BUFFER_HIGH = 1 << 20  # bytes queued on a side before the other side is paused


class Bridge(Protocol):
    """What the SSH side drives; `open_bridge` makes the one the stream allows."""

    stream: ExecStream

    @property
    def ended(self) -> bool: ...

    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None:
        """Close the process's stdin. A terminal has no half-close: like sshd, ignore it."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        """Detach (the process keeps running unless something stops it)."""


async def open_bridge(stream: ExecStream, sink: Sink) -> Bridge:
    if stream.direct is not None:
        direct = DirectBridge(stream, sink)
        if direct.attach():
            return direct
    return await SocketBridge.connect(stream, sink)


class DirectBridge:
    """A bridge to a process the runtime relays in this process: its callbacks
    come here, and what the SSH side writes goes to the runtime's peer."""

    def __init__(self, stream: ExecStream, sink: Sink) -> None:
        self.stream = stream
        self._sink = sink
        self._peer: StreamPeer | None = None
        self._ended = False

    def attach(self) -> bool:
        assert self.stream.direct is not None
        self._peer = self.stream.direct.attach(self)
        return self._peer is not None

    @property
    def ended(self) -> bool:
        return self._ended

    # -- the runtime's side (StreamSink) -------------------------------------------------
    def output(self, stream: int, data: bytes) -> None:
        self._sink.output(stream, data)

    def output_ended(self) -> None:
        if not self._ended:
            self._ended = True
            self._sink.output_ended()

    def pause_input(self) -> None:
        self._sink.pause_input()

    def resume_input(self) -> None:
        self._sink.resume_input()

    # -- driven by the SSH side ------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._peer is not None:
            self._peer.write(data)

    def write_eof(self) -> None:
        if self._peer is not None and not self.stream.tty:
            self._peer.write_eof()

    def pause_reading(self) -> None:
        if self._peer is not None:
            self._peer.pause_reading()

    def resume_reading(self) -> None:
        if self._peer is not None:
            self._peer.resume_reading()

    def close(self) -> None:
        if self._peer is not None:
            self._peer.close()


class SocketBridge(asyncio.Protocol):
    def __init__(self, stream: ExecStream, sink: Sink) -> None:
        self.stream = stream
        self._sink = sink
        self._transport: asyncio.Transport | None = None
        self._stderr: _Stderr | None = None
        self._open_outputs = 1 if stream.err_sock is None else 2
        self._ended = False

    @classmethod
    async def connect(cls, stream: ExecStream, sink: Sink) -> SocketBridge:
        bridge = cls(stream, sink)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: bridge, sock=stream.sock)
        if stream.err_sock is not None:
            stderr = _Stderr(bridge, sink)
            await loop.create_connection(lambda: stderr, sock=stream.err_sock)
            bridge._stderr = stderr
        if stream.initial:
            bridge.data_received(stream.initial)
        return bridge

    @property
    def ended(self) -> bool:
        return self._ended

    def _output_closed(self) -> None:
        self._open_outputs -= 1
        if not self._open_outputs and not self._ended:
            self._ended = True
            self._sink.output_ended()

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=BUFFER_HIGH)

    def data_received(self, data: bytes) -> None:
        for stream, payload in self.stream.decoder.feed(data):
            self._sink.output(stream, payload)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._output_closed()

    def pause_writing(self) -> None:
        self._sink.pause_input()

    def resume_writing(self) -> None:
        self._sink.resume_input()

    # -- driven by the SSH side ------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def write_eof(self) -> None:
        """Close the process's stdin. A terminal has no half-close: like sshd, ignore it."""
        transport = self._transport
        if self.stream.tty or transport is None or transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()

    def pause_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
        if self._stderr is not None:
            self._stderr.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        if self._stderr is not None:
            self._stderr.resume_reading()

    def close(self) -> None:
        """Detach (the process keeps running unless something stops it)."""
        if self._transport is not None:
            self._transport.close()
        if self._stderr is not None:
            self._stderr.close()


class _Stderr(asyncio.Protocol):
    """The read-only socket of a stream whose stderr comes apart from stdout."""

    def __init__(self, bridge: SocketBridge, sink: Sink) -> None:
        self._bridge = bridge
        self._sink = sink
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._sink.output(STDERR, data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._bridge._output_closed()

    def pause_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
