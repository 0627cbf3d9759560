"""Attached `docker exec` streams: the SSH gateway's data path into containers.

`DockerRuntime` calls these inside its error translation; docker-py exceptions
raised here are translated there.

The engine hijacks the HTTP connection of `POST /exec/{id}/start`: from then on
the socket carries the process's stdin one way and its output the other way,
unframed with a TTY and in Docker's 8-byte-header frames without one. We take
the socket out of docker-py (a `dup` of it, so closing docker-py's objects
returns its connection slot to the pool) and hand it over non-blocking, with
any output that docker-py's HTTP reader had already buffered.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

import docker

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import STDERR, STDOUT, ExecStream, RawOutput

_FRAME_HEADER = struct.Struct(">BxxxL")
_DOCKER_STDERR = 2


class DockerFrames:
    """Docker's multiplexed output: a header (stream, 3 zero bytes, big-endian
    length) before each payload. Payloads are passed on as they arrive, not
    held back until a frame is complete."""

    def __init__(self) -> None:
        self._pending = b""  # an incomplete header
        self._stream = STDOUT
        self._remaining = 0  # payload bytes still to come in the current frame

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer = self._pending + data if self._pending else data
        pieces: list[tuple[int, bytes]] = []
        position, end = 0, len(buffer)
        while True:
            if self._remaining:
                take = min(self._remaining, end - position)
                if take:
                    pieces.append((self._stream, buffer[position : position + take]))
                position += take
                self._remaining -= take
                if self._remaining:
                    break
            if end - position < _FRAME_HEADER.size:
                break
            kind, self._remaining = _FRAME_HEADER.unpack_from(buffer, position)
            self._stream = STDERR if kind == _DOCKER_STDERR else STDOUT
            position += _FRAME_HEADER.size
        self._pending = buffer[position:]
        return pieces


def open_exec_stream(
    api: docker.APIClient, container_id: str, command: list[str], tty: bool, env: dict[str, str]
) -> ExecStream:
    created = api.exec_create(
        container_id, command, stdin=True, stdout=True, stderr=True, tty=tty, environment=env
    )
    exec_id = str(created["Id"])
    attached = api.exec_start(exec_id, tty=tty, socket=True)
    sock, initial = _take_socket(attached)
    return ExecStream(
        exec_id=exec_id,
        sock=sock,
        initial=initial,
        decoder=RawOutput() if tty else DockerFrames(),
        tty=tty,
    )


def _take_socket(attached: Any) -> tuple[socket.socket, bytes]:
    """A non-blocking duplicate of the hijacked socket, and what was buffered."""
    raw = getattr(attached, "_sock", attached)  # socket.SocketIO wraps the socket
    if isinstance(raw, ssl.SSLSocket) or not isinstance(raw, socket.socket):
        attached.close()
        raise RuntimeFailure(
            "SSH sessions need the Docker Engine on a Unix socket or plain TCP "
            "(GPUDOCK_DOCKER_HOST with TLS is not supported for them)"
        )
    raw.setblocking(False)  # so that reading what is buffered below cannot wait
    sock = raw.dup()
    sock.setblocking(False)
    response = getattr(attached, "_response", None)
    initial = b""
    if response is not None:
        # http.client may have read past the response headers into its buffer.
        buffered = response.raw._fp.fp
        initial = buffered.read1(1 << 16) or b""
        response.close()  # returns docker-py's (now closed) connection to its pool
    attached.close()
    return sock, initial


def resize_exec(api: docker.APIClient, exec_id: str, width: int, height: int) -> None:
    try:
        api.exec_resize(exec_id, height=height, width=width)
    except docker.errors.APIError as exc:
        if exc.status_code in (404, 409, 500):  # ended, or not started with a TTY
            return
        raise


def exec_exit_code(api: docker.APIClient, exec_id: str) -> int | None:
    info = api.exec_inspect(exec_id)
    if info.get("Running"):
        return None
    code = info.get("ExitCode")
    return None if code is None else int(code)
