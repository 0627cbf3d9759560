"""The agent's command session: runtime calls from the server, run on this host.

The server opens a session with subsystem `gpudock-runtime` on the link it
holds; each line is a `runtime.calls` request. Every request runs in a worker
thread of its own on the agent's `DockerRuntime` (the host's engine through
its Unix socket), and its answer is written when it ends, so a slow call (a
pull, a stop with a grace period) never holds a fast one back.

Generations: a request scoped to an instance carries the instance's placement
generation. `Generations` keeps the highest one seen per instance, in
`<state dir>/generations.json` (written before the command runs, so a restart
of the agent does not forget it), and refuses an older one with
`StaleGeneration`: a command that was replayed, or that arrives late after
the instance was placed again, cannot act on it any more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncssh
from pydantic import ValidationError

from gpudock.agent.state import write_private_json
from gpudock.errors import RuntimeFailure
from gpudock.runtime import calls
from gpudock.runtime.base import Runtime, StaleGeneration
from gpudock.runtime.calls import CallError, CallRequest, CallResponse, InstanceScope

log = logging.getLogger(__name__)
GENERATIONS_FILE = "generations.json"
WORKERS = 16


class Generations:
    """The highest placement generation seen per instance, kept on disk."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / GENERATIONS_FILE
        self._lock = threading.Lock()
        try:
            self._seen: dict[str, int] = {
                str(k): int(v) for k, v in json.loads(self._path.read_text()).items()
            }
        except FileNotFoundError:
            self._seen = {}
        except (ValueError, AttributeError) as exc:
            # Losing it only means one stale command could slip through: keep going.
            log.warning("%s is damaged (%s): starting afresh", self._path, exc)
            self._seen = {}

    def admit(self, scope: InstanceScope) -> None:
        """Accept `scope` (recording a newer generation) or raise `StaleGeneration`."""
        with self._lock:
            seen = self._seen.get(scope.instance, -1)
            if scope.generation < seen:
                raise StaleGeneration(
                    f"instance {scope.instance} has placement generation {seen} on this host; "
                    f"a command for generation {scope.generation} comes too late"
                )
            if scope.generation > seen:
                self._seen[scope.instance] = scope.generation
                self._save()

    def _save(self) -> None:
        write_private_json(self._path, self._seen)  # on disk before the command it admits runs


class CommandServer:
    """Runs the server's runtime calls on this host's engine, many at once."""

    def __init__(self, runtime: Runtime, generations: Generations) -> None:
        self._runtime = runtime
        self._generations = generations
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpudock-agent-call")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle(self, request: CallRequest) -> CallResponse:
        """Blocking: one call, with its scope checked first. Always answers: an
        error the runtime failed to translate is a bug here, but the server's
        caller must still hear back, not wait for its timeout."""
        try:
            return calls.dispatch(self._runtime, request, self._generations.admit)
        except Exception as exc:
            log.exception("runtime call %s failed", request.method)
            failure = RuntimeFailure(f"the agent failed running {request.method}: {exc}")
            return CallResponse(
                id=request.id, error=CallError(code=failure.code, message=failure.message)
            )

    async def serve(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """Until the session ends: read requests, answer each when it is done."""
        running: set[asyncio.Task[None]] = set()
        lock = asyncio.Lock()
        try:
            while True:
                try:
                    line = await process.stdin.readuntil(b"\n")
                except (asyncio.IncompleteReadError, asyncssh.Error, OSError):
                    return
                try:
                    request = CallRequest.model_validate_json(line)
                except ValidationError as exc:
                    log.warning("not a runtime call, session closed: %s", exc.errors()[0]["msg"])
                    return
                task = asyncio.get_running_loop().create_task(self._answer(process, request, lock))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            for task in running:  # the server has gone: nobody would read the answers
                task.cancel()
            process.close()

    async def _answer(
        self, process: asyncssh.SSHServerProcess[bytes], request: CallRequest, lock: asyncio.Lock
    ) -> None:
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self._pool, self.handle, request)
        async with lock:  # one whole line at a time
            try:
                process.stdout.write(response.model_dump_json().encode() + b"\n")
                await process.stdout.drain()
            except (asyncssh.Error, OSError, BrokenPipeError) as exc:
                log.info("answer to call %d not sent: %s", request.id, exc)
