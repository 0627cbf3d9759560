"""Exec streams over the link, the server's end: one SSH channel per exec.

`ExecChannels.open` asks the agent for an exec channel (`agent.streams`: the
request in the exec command, a pty request for a terminal), reads its first
line (the exec's id, or the engine's error raised as its class), and hands
the caller what every runtime hands out for an exec: an `ExecStream` on a
plain socket. The other end of that socket pair is relayed to the channel
here, on the gateway's loop: what the caller writes is the process's stdin
(its `shutdown(SHUT_WR)` the stdin's end), the channel's stdout comes back on
`sock` and its stderr on `err_sock` (one stream with a terminal). The exit
status the agent sends is the exec's exit code; a window change the caller
asks for (`resize`) goes as SSH's own window-change request.

A caller on the same loop (the SSH gateway) may instead attach to the channel
itself (`ExecStream.direct`): the bytes then go between the link's channel
and the caller's callbacks with no socket pair between them, which saves the
one busy process (the server relays both the tenant's SSH and the link) two
syscalls and a wake-up per chunk each way. What was already relayed to the
socket pair before the caller attached is read back out of it first.

Exec ids over the link are `link:<host id>:<the agent's exec id>`, so that
`HostRuntimes.for_exec` finds the host a resize or an exit code is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import OrderedDict

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import STDERR, STDOUT, ExecStream, RawOutput, StreamPeer, StreamSink
from gpudock.runtime.calls import EXEC_COMMAND, CallError, ExecOpened, ExecRequest, error_for
from gpudock.runtime.link import exec_id_on

log = logging.getLogger(__name__)
TERMINAL = "xterm-256color"
LOST = 255  # the exit code of an exec whose channel closed without one
ENDED_KEPT = 256  # exit codes kept after they were first read (a caller may ask again)
BUFFER_HIGH = 1 << 20  # bytes queued towards one side before the other is paused
MAX_FIRST_LINE = 1 << 16


class ExecChannels:
    """The exec channels on one link (used on the gateway's loop, but for
    `exit_code`, which only reads)."""

    def __init__(self, conn: asyncssh.SSHClientConnection, host_id: str, host_name: str) -> None:
        self._conn = conn
        self._host_id = host_id
        self._host_name = host_name
        self._open: dict[str, LinkExec] = {}
        self._ended: OrderedDict[str, int] = OrderedDict()

    @property
    def connection(self) -> asyncssh.SSHClientConnection:
        return self._conn

    async def open(self, request: ExecRequest, timeout_s: float) -> ExecStream:
        relay = LinkExec()
        await self._conn.create_session(
            lambda: relay,
            EXEC_COMMAND + request.model_dump_json(),
            term_type=TERMINAL if request.tty else None,
            term_size=(80, 24) if request.tty else None,
            encoding=None,
        )
        try:
            opened = ExecOpened.model_validate_json(
                await asyncio.wait_for(relay.first_line, timeout_s)
            )
        except (ConnectionError, TimeoutError, ValidationError) as exc:
            relay.close()
            raise RuntimeFailure(
                f"host {self._host_name}: the agent did not start the exec ({exc})"
            ) from exc
        if opened.exec_id is None:
            relay.close()
            raise error_for(CallError(code=opened.code or "", message=opened.message))
        exec_id = exec_id_on(self._host_id, opened.exec_id)
        stream = await relay.relay_to_sockets(exec_id, tty=request.tty)
        self._open[exec_id] = relay
        return stream

    def resize(self, exec_id: str, width: int, height: int) -> None:
        relay = self._open.get(exec_id)
        if relay is not None:
            relay.resize(width, height)

    def exit_code(self, exec_id: str) -> int | None:
        if exec_id in self._ended:
            return self._ended[exec_id]
        relay = self._open.get(exec_id)
        status = LOST if relay is None else relay.exit_code()
        if status is not None:
            self._open.pop(exec_id, None)
            self._ended[exec_id] = status
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
        return status

    def close(self) -> None:
        for relay in self._open.values():
            relay.close()


class LinkExec(asyncssh.SSHClientSession[bytes]):
    """One exec channel on the link: its first line, then the process's bytes,
    relayed to the caller's socket pair (`_Pump`) until, perhaps, a caller on
    this loop attaches (`attach`) and takes them straight from here."""

    def __init__(self) -> None:
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None
        self._loop = asyncio.get_running_loop()
        self.first_line: asyncio.Future[bytes] = self._loop.create_future()
        self._head = b""
        self._held: list[tuple[int, bytes]] = []  # after the first line, before a relay
        self._output_ended = False
        self._exit_status: int | None = None
        self._pump: _Pump | None = None
        self._err_pump: _Pump | None = None
        self._sink: StreamSink | None = None
        self._input_paused = False

    # -- the channel (asyncssh's callbacks) -------------------------------------------
    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan
        chan.set_write_buffer_limits(high=BUFFER_HIGH)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        stream = STDERR if datatype == asyncssh.EXTENDED_DATA_STDERR else STDOUT
        if not self.first_line.done():
            self._read_first_line(data)
        elif self._sink is not None:
            self._sink.output(stream, data)
        elif self._pump is not None:
            (self._err_pump if stream == STDERR and self._err_pump else self._pump).send(data)
        else:
            self._held.append((stream, data))

    def _read_first_line(self, data: bytes) -> None:
        self._head += data
        line, newline, rest = self._head.partition(b"\n")
        if newline:
            self._head = b""
            self.first_line.set_result(line)
            if rest:
                self._held.append((STDOUT, rest))
        elif len(self._head) > MAX_FIRST_LINE:
            self.first_line.set_exception(ConnectionError("no answer line from the agent"))

    def eof_received(self) -> bool:
        self._output_ended = True
        if self._sink is not None:
            self._sink.output_ended()
        elif self._pump is not None:
            self._end_pumps()
        return True  # the agent closes the channel once it has sent the exit status

    def exit_status_received(self, status: int) -> None:
        self._exit_status = status

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.first_line.done():
            self.first_line.set_exception(ConnectionError(f"the exec channel closed ({exc})"))
        if not self._output_ended:
            self.eof_received()
        for pump in (self._pump, self._err_pump):
            if pump is not None and self._sink is None:
                pump.close()  # after what it still holds for the caller

    def pause_writing(self) -> None:
        self._input_paused = True
        if self._sink is not None:
            self._sink.pause_input()
        elif self._pump is not None:
            self._pump.pause_reading()

    def resume_writing(self) -> None:
        self._input_paused = False
        if self._sink is not None:
            self._sink.resume_input()
        elif self._pump is not None:
            self._pump.resume_reading()

    # -- what the gateway asks --------------------------------------------------------
    def resize(self, width: int, height: int) -> None:
        if self._chan is not None:
            with contextlib.suppress(asyncssh.Error, OSError):
                self._chan.change_terminal_size(width, height)

    def exit_code(self) -> int | None:
        """Its exit status; LOST once the channel closed without one (the link
        or the agent went before the process ended); None while it runs."""
        if self._exit_status is None and self._chan is not None and self._chan.is_closing():
            return LOST
        return self._exit_status

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()

    # -- the socket pair ---------------------------------------------------------------
    async def relay_to_sockets(self, exec_id: str, *, tty: bool) -> ExecStream:
        """The stream the runtime hands out: the caller's ends of the socket pairs."""
        ours, theirs = socket.socketpair()
        err_ours = err_pump = None
        pump = await _Pump.start(self, theirs, ours, reads_input=True)
        if not tty:
            err_ours, err_theirs = socket.socketpair()
            err_pump = await _Pump.start(self, err_theirs, err_ours, reads_input=False)
        # Both at once: output that came while the pairs were made is held till now.
        self._pump, self._err_pump = pump, err_pump
        for stream, data in self._held:
            self.data_received(data, asyncssh.EXTENDED_DATA_STDERR if stream == STDERR else None)
        self._held.clear()
        if self._output_ended:
            self._end_pumps()
        return ExecStream(
            exec_id=exec_id,
            sock=ours,
            initial=b"",
            decoder=RawOutput(),
            tty=tty,
            err_sock=err_ours,
            direct=self,
        )

    def _end_pumps(self) -> None:
        assert self._pump is not None
        self._pump.send_eof()
        if self._err_pump is not None:
            self._err_pump.send_eof()

    def caller_input(self, data: bytes) -> None:
        if self._chan is not None:
            self._chan.write(data)

    def caller_input_ended(self) -> None:
        if self._chan is not None:
            with contextlib.suppress(asyncssh.Error, OSError):
                self._chan.write_eof()

    def caller_left(self) -> None:
        """The caller closed its socket: detach (the process may run on)."""
        if self._sink is None:
            self.close()

    def caller_slow(self, slow: bool) -> None:
        if self._chan is not None and self._sink is None:
            (self._chan.pause_reading if slow else self._chan.resume_reading)()

    # -- DirectExec ----------------------------------------------------------------
    def attach(self, sink: StreamSink) -> StreamPeer | None:
        if self._sink is not None or self._pump is None or self._chan is None:
            return None
        if asyncio.get_running_loop() is not self._loop:
            return None
        streams = [(STDOUT, self._pump)]
        if self._err_pump is not None:
            streams.append((STDERR, self._err_pump))
        if any(not pump.can_hand_over() for _, pump in streams):
            return None
        unread, input_ended = self._pump.take_unread_input()
        for data in unread:
            self.caller_input(data)
        if input_ended:
            self.caller_input_ended()
        relayed = [(stream, pump.take_relayed()) for stream, pump in streams]
        for _, pump in streams:
            pump.hand_over()
        self._sink = sink
        for stream, chunks in relayed:
            for data in chunks:
                sink.output(stream, data)
        if self._output_ended:
            self._loop.call_soon(sink.output_ended)
        self._chan.resume_reading()
        if self._input_paused:
            sink.pause_input()
        return _Attached(self._chan)


class _Attached:
    """The process's side for a sink that attached: the link's channel itself."""

    def __init__(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan

    def write(self, data: bytes) -> None:
        if not self._chan.is_closing():
            self._chan.write(data)

    def write_eof(self) -> None:
        if not self._chan.is_closing():
            with contextlib.suppress(asyncssh.Error, OSError):
                self._chan.write_eof()

    def pause_reading(self) -> None:
        self._chan.pause_reading()

    def resume_reading(self) -> None:
        self._chan.resume_reading()

    def close(self) -> None:
        self._chan.close()


class _Pump(asyncio.Protocol):
    """The relay's end of one socket pair: the channel's output is written to it,
    and (on the stdout pair) what the caller writes is read from it."""

    def __init__(self, relay: LinkExec, sock: socket.socket, caller_end: socket.socket) -> None:
        self._relay = relay
        self._sock = sock
        self._caller_end = caller_end
        self._transport: asyncio.Transport | None = None
        self._handed_over = False
        self._reads_input = True

    @classmethod
    async def start(
        cls, relay: LinkExec, sock: socket.socket, caller_end: socket.socket, *, reads_input: bool
    ) -> _Pump:
        sock.setblocking(False)
        caller_end.setblocking(False)
        pump = cls(relay, sock, caller_end)
        pump._reads_input = reads_input
        await asyncio.get_running_loop().create_connection(lambda: pump, sock=sock)
        return pump

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=BUFFER_HIGH)
        if not self._reads_input:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        self._relay.caller_input(data)

    def eof_received(self) -> bool:
        self._relay.caller_input_ended()
        return True  # the output may go on after the caller's stdin ended

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._handed_over and self._reads_input:
            self._relay.caller_left()

    def pause_writing(self) -> None:
        self._relay.caller_slow(True)

    def resume_writing(self) -> None:
        self._relay.caller_slow(False)

    # -- driven by the relay ---------------------------------------------------------
    def send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def send_eof(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        if self._reads_input:
            self._transport.write_eof()
        else:
            self._transport.close()

    def pause_reading(self) -> None:
        if self._transport is not None and self._reads_input and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and self._reads_input and not self._transport.is_closing():
            self._transport.resume_reading()

    # -- handing over to an attached sink -----------------------------------------------
    def can_hand_over(self) -> bool:
        """Nothing is queued in the transport (what reached the socket can be read back)."""
        return self._transport is not None and self._transport.get_write_buffer_size() == 0

    def take_unread_input(self) -> tuple[list[bytes], bool]:
        """What the caller wrote that this pump has not read yet, and whether
        the caller's end of file came after it."""
        return _read_ready(self._sock)

    def take_relayed(self) -> list[bytes]:
        """What this pump sent that the caller has not read yet."""
        return _read_ready(self._caller_end)[0]

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def hand_over(self) -> None:
        self._handed_over = True
        if self._transport is not None:
            self._transport.abort()
        self._caller_end.close()


def _read_ready(sock: socket.socket) -> tuple[list[bytes], bool]:
    """What a non-blocking socket holds now, and whether its end of file follows."""
    chunks = []
    try:
        while data := sock.recv(1 << 18, socket.MSG_DONTWAIT):
            chunks.append(data)
    except OSError:  # BlockingIOError: nothing more for now
        return chunks, False
    return chunks, True
