"""A framed stream from one agent host to another, relayed here
(`runtime.transfer`, `agent.framed`): a data volume, or an image.

`relay_stream` asks the destination where to resume, asks the source for the
stream from there, and pipes one into the other (SSH's per-channel windows are
the flow control at both ends). The destination's reports are progress; a
frame it refused, or a link that dropped, is asked again from the point the
destination names, up to `ATTEMPTS` times in a row without progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.transfer import (
    RECEIVE_COMMAND,
    SEND_COMMAND,
    ReceiveReport,
    VolumeCopied,
    VolumeReceive,
    VolumeSend,
)

log = logging.getLogger(__name__)
ATTEMPTS = 3  # tries in a row that move nothing before the copy is given up (for now)
PIPE_CHUNK = 1 << 18
STALL_S = 20.0  # a try that moves nothing this long is given up and resumed


@dataclass(frozen=True)
class StreamRoute:
    source_conn: asyncssh.SSHClientConnection
    target_conn: asyncssh.SSHClientConnection
    receive_command: str
    send_command: Callable[[int], str]  # the source's, from a resume point
    what: str  # in messages: "volume X", "image Y"


@dataclass(frozen=True)
class VolumeRoute:
    source_conn: asyncssh.SSHClientConnection
    target_conn: asyncssh.SSHClientConnection
    source_volume: str
    target_volume: str
    scope: InstanceScope | None

    def stream(self) -> StreamRoute:
        receive = VolumeReceive(volume=self.target_volume, scope=self.scope)

        def send(resume_at: int) -> str:
            request = VolumeSend(volume=self.source_volume, resume_at=resume_at, scope=self.scope)
            return SEND_COMMAND + request.model_dump_json()

        return StreamRoute(
            self.source_conn,
            self.target_conn,
            RECEIVE_COMMAND + receive.model_dump_json(),
            send,
            f"volume {self.source_volume}",
        )


async def relay_volume(route: VolumeRoute, on_progress: Callable[[int], None]) -> VolumeCopied:
    return await relay_stream(route.stream(), on_progress)


async def relay_stream(route: StreamRoute, on_progress: Callable[[int], None]) -> VolumeCopied:
    sent = 0
    resumed: list[int] = []
    failures = 0
    while True:
        outcome, moved, resume_at = await _one_try(route, on_progress)
        sent += moved
        resumed.append(resume_at)
        if outcome is not None:
            return VolumeCopied(outcome.done or 0, sent, outcome.sha256 or "", resumed)
        failures = 0 if moved else failures + 1
        if failures >= ATTEMPTS:
            raise RuntimeUnavailable(
                f"copying {route.what}: {ATTEMPTS} tries in a row moved "
                "nothing; the next try resumes where it stopped"
            )


async def _one_try(
    route: StreamRoute, on_progress: Callable[[int], None]
) -> tuple[ReceiveReport | None, int, int]:
    """(the end report or None, bytes piped, where it resumed)."""
    try:
        receiver = await asyncio.wait_for(
            route.target_conn.create_process(route.receive_command, encoding=None), STALL_S
        )
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        log.warning("copy of %s: no receive channel (%s)", route.what, exc)
        return None, 0, 0
    try:
        first = await next_report(receiver)
        if first is None or first.resume_at is None:
            raise RuntimeFailure(f"the destination did not say where to resume: {first}")
        sender = await asyncio.wait_for(
            route.source_conn.create_process(route.send_command(first.resume_at), encoding=None),
            STALL_S,
        )
        piping = asyncio.ensure_future(_pipe(sender, receiver))
        try:
            end = await follow(receiver, on_progress, route.what)
        finally:
            sender.close()
            moved, failure = await piping
        if end is None and failure:
            raise RuntimeFailure(f"the source could not send {route.what}: {failure}")
        return end, moved, first.resume_at
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        log.warning("copy of %s: a link failed (%s); resuming", route.what, exc)
        return None, 0, 0
    finally:
        receiver.close()


async def follow(
    receiver: asyncssh.SSHClientProcess[bytes], on_progress: Callable[[int], None], what: str
) -> ReceiveReport | None:
    while (report := await next_report(receiver)) is not None:
        if report.error is not None:
            raise RuntimeFailure(f"the copy of {what} failed: {report.error}")
        if report.received is not None:
            on_progress(report.received)
        if report.done is not None:
            on_progress(report.done)
            return report
        if report.resume_at is not None:
            log.warning("copy of %s: %s; asking again", what, report.message)
            return None
    return None


async def next_report(process: asyncssh.SSHClientProcess[bytes]) -> ReceiveReport | None:
    try:
        line = await asyncio.wait_for(process.stdout.readuntil(b"\n"), STALL_S)
    except (asyncio.IncompleteReadError, asyncssh.Error, OSError, TimeoutError):
        return None
    try:
        return ReceiveReport.model_validate_json(line)
    except ValidationError as exc:
        raise RuntimeFailure(f"the destination sent a bad report: {exc}") from exc


async def _pipe(
    sender: asyncssh.SSHClientProcess[bytes], receiver: asyncssh.SSHClientProcess[bytes]
) -> tuple[int, str]:
    """(bytes piped, the source's error if it failed); the receiver's stdin ends with it."""
    moved = 0
    try:
        while data := await asyncio.wait_for(sender.stdout.read(PIPE_CHUNK), STALL_S):
            receiver.stdin.write(data)
            await asyncio.wait_for(receiver.stdin.drain(), STALL_S)
            moved += len(data)
        error = (await sender.stderr.read()).decode(errors="replace")[-300:]
        receiver.stdin.write_eof()
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        log.warning("volume relay ended: %s", exc or "stalled")
        # The stream ends here for the destination too: it says where to resume
        # at once rather than wait for bytes that will not come.
        with contextlib.suppress(asyncssh.Error, OSError):
            receiver.stdin.write_eof()
        return moved, ""
    return moved, error
