"""The server's end of an agent's command session, and the bridge to it from
the worker threads that call the runtime.

The gateway opens one session (subsystem `gpudock-runtime`) on each link once
the agent is welcomed. `CommandChannel` writes requests on it and matches the
answers to their callers by id, so any number of calls are in flight at once
and each returns when its own answer comes. `ThreadBridge` is the
`CallTransport` a host's `LinkRuntime` uses: the reconciler and services call
the runtime from worker threads, so each call (and each exec, `streams.py`) is
handed to the gateway's event loop (`asyncio.run_coroutine_threadsafe`) and
waited for with the call's timeout. When the link drops, every call in flight fails with
`RuntimeUnavailable` at once instead of waiting for its timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import asyncssh
from pydantic import ValidationError

from gpudock.agentgw.image_copy import push_image, relay_image
from gpudock.agentgw.ports import PortChannels
from gpudock.agentgw.streams import ExecChannels
from gpudock.agentgw.volume_copy import VolumeRoute, relay_volume
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime import calls
from gpudock.runtime.base import ExecStream, PortSocket
from gpudock.runtime.calls import CallRequest, CallResponse, ExecRequest, InstanceScope
from gpudock.runtime.link import CallTransport
from gpudock.runtime.link_ports import PortRequest
from gpudock.runtime.transfer import ImageMove, VolumeCopied

log = logging.getLogger(__name__)
PROGRESS_POLL_S = 0.5  # how often a thread waiting for a copy reports its progress
T = TypeVar("T")


class CommandChannel:
    """One command session on one link (used on the gateway's event loop only)."""

    def __init__(
        self,
        host_name: str,
        writer: asyncssh.SSHWriter[bytes],
        reader: asyncssh.SSHReader[bytes],
    ) -> None:
        self.host_name = host_name
        self._writer = writer
        self._reader = reader
        self._pending: dict[int, asyncio.Future[CallResponse]] = {}
        self._closed: str | None = None
        self._listening = asyncio.get_running_loop().create_task(self._listen())

    @classmethod
    async def open(cls, conn: asyncssh.SSHClientConnection, host_name: str) -> CommandChannel:
        writer, reader, _ = await conn.open_session(subsystem=calls.SUBSYSTEM, encoding=None)
        return cls(host_name, writer, reader)

    async def request(self, request: CallRequest) -> CallResponse:
        if self._closed is not None:
            raise self._down()
        answer = asyncio.get_running_loop().create_future()
        self._pending[request.id] = answer
        try:
            self._writer.write(request.model_dump_json().encode() + b"\n")
            await self._writer.drain()
            response: CallResponse = await answer
            return response
        except (asyncssh.Error, OSError) as exc:
            self._end(f"the link was lost: {exc}")
            raise self._down() from exc
        finally:
            self._pending.pop(request.id, None)

    def close(self) -> None:
        self._end("the link is closed")
        self._listening.cancel()

    async def _listen(self) -> None:
        try:
            while True:
                line = await self._reader.readuntil(b"\n")
                try:
                    response = CallResponse.model_validate_json(line)
                except ValidationError as exc:
                    log.warning("host %s sent a bad answer: %s", self.host_name, exc)
                    continue
                answer = self._pending.get(response.id)
                if answer is not None and not answer.done():
                    answer.set_result(response)
        except (asyncio.IncompleteReadError, asyncssh.Error, OSError) as exc:
            self._end(f"the agent's command session ended ({exc or 'closed'})")

    def _end(self, why: str) -> None:
        if self._closed is None:
            self._closed = why
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(self._down())

    def _down(self) -> RuntimeUnavailable:
        return RuntimeUnavailable(
            f"host {self.host_name}: {self._closed}; whether the agent ran the call is "
            "unknown, and running it again is safe"
        )


class ThreadBridge:
    """A `CallTransport` for worker threads, onto the link's event loop."""

    def __init__(
        self,
        channel: CommandChannel,
        execs: ExecChannels,
        ports: PortChannels,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._channel = channel
        self._execs = execs
        self._ports = ports
        self._loop = loop

    def open_exec(self, request: ExecRequest, timeout_s: float) -> ExecStream:
        self._refuse_on_the_loop()
        opening = asyncio.run_coroutine_threadsafe(self._execs.open(request, timeout_s), self._loop)
        try:
            return opening.result(timeout_s)
        except TimeoutError as exc:
            opening.cancel()
            raise RuntimeUnavailable(
                f"host {self._channel.host_name}: its agent did not start the exec within "
                f"{timeout_s:g} s"
            ) from exc
        except (asyncssh.Error, OSError) as exc:
            raise RuntimeUnavailable(
                f"host {self._channel.host_name}: the exec channel failed: {exc}"
            ) from exc

    def open_port(self, request: PortRequest, timeout_s: float) -> PortSocket:
        self._refuse_on_the_loop()
        opening = asyncio.run_coroutine_threadsafe(self._ports.open(request, timeout_s), self._loop)
        try:
            return PortSocket(opening.result(timeout_s), None)
        except TimeoutError as exc:
            opening.cancel()
            raise RuntimeUnavailable(
                f"host {self._channel.host_name}: its agent did not connect to port "
                f"{request.port} within {timeout_s:g} s"
            ) from exc
        except (asyncssh.Error, OSError) as exc:
            raise RuntimeUnavailable(
                f"host {self._channel.host_name}: the port channel failed: {exc}"
            ) from exc

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        self._loop.call_soon_threadsafe(self._execs.resize, exec_id, width, height)

    def exec_exit_code(self, exec_id: str) -> int | None:
        return self._execs.exit_code(exec_id)

    def send_volume(
        self,
        target: CallTransport,
        volumes: tuple[str, str],
        scope: InstanceScope | None,
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> VolumeCopied:
        """Relay volume `volumes[0]` of this host into `volumes[1]` on `target`'s
        host (`agentgw.volume_copy`); progress is reported from the calling thread."""
        self._refuse_on_the_loop()
        if not isinstance(target, ThreadBridge):
            raise RuntimeFailure("a volume goes over links only to another agent host")
        received = [0]
        route = VolumeRoute(
            self._execs.connection, target._execs.connection, volumes[0], volumes[1], scope
        )
        copying = asyncio.run_coroutine_threadsafe(
            relay_volume(route, lambda done: received.__setitem__(0, done)), self._loop
        )
        late = (
            f"copying volume {volumes[0]} from {self._channel.host_name} ran past "
            f"{timeout_s:g} s; the next try resumes it"
        )
        return _reporting(copying, received, on_progress, timeout_s, late)

    def send_image(
        self,
        target: CallTransport,
        move: ImageMove,
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> int:
        """`docker save` of `move.ref` here into `docker load` on `target`'s host
        (`agentgw.image_copy`); the bytes moved, reported from the calling thread."""
        self._refuse_on_the_loop()
        if not isinstance(target, ThreadBridge):
            raise RuntimeFailure("an image goes over links only to another agent host")
        moved = [0]
        moving = asyncio.run_coroutine_threadsafe(
            relay_image(
                self._execs.connection,
                target._execs.connection,
                move,
                lambda done: moved.__setitem__(0, done),
            ),
            self._loop,
        )
        late = f"moving image {move.ref} ran past {timeout_s:g} s"
        return _reporting(moving, moved, on_progress, timeout_s, late)

    def push_image(
        self,
        move: ImageMove,
        open_chunks: Callable[[], Iterator[bytes]],
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> int:
        """An image of the server's own engine (`open_chunks`: its `docker save`)
        into `docker load` on this host (`agentgw.image_copy.push_image`)."""
        self._refuse_on_the_loop()
        moved = [0]
        pushing = asyncio.run_coroutine_threadsafe(
            push_image(
                self._execs.connection, move, open_chunks, lambda done: moved.__setitem__(0, done)
            ),
            self._loop,
        )
        late = f"sending image {move.ref} to {self._channel.host_name} ran past {timeout_s:g} s"
        return _reporting(pushing, moved, on_progress, timeout_s, late)

    def _refuse_on_the_loop(self) -> None:
        if _running_loop() is self._loop:
            raise RuntimeError("a runtime call from the link's own event loop would block it")

    def call(self, request: CallRequest, timeout_s: float) -> CallResponse:
        self._refuse_on_the_loop()
        pending = asyncio.run_coroutine_threadsafe(self._channel.request(request), self._loop)
        try:
            return pending.result(timeout_s)
        except TimeoutError as exc:
            pending.cancel()
            raise RuntimeUnavailable(
                f"host {self._channel.host_name}: no answer to {request.method} from its agent "
                f"within {timeout_s:g} s; whether it ran is unknown, and running it again is safe"
            ) from exc


def _reporting(
    running: concurrent.futures.Future[T],
    done: list[int],
    on_progress: Callable[[int], None],
    timeout_s: float,
    late: str,
) -> T:
    """`running`'s result, telling `on_progress` (from this thread) what `done[0]`
    says every PROGRESS_POLL_S meanwhile; `RuntimeUnavailable(late)` past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    reported = -1
    while True:
        try:
            return running.result(PROGRESS_POLL_S)
        except TimeoutError:
            if time.monotonic() > deadline:
                running.cancel()
                raise RuntimeUnavailable(late) from None
        finally:
            if done[0] != reported:
                reported = done[0]
                on_progress(reported)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    return None
