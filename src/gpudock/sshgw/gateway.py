"""The SSH gateway: one port for every instance, on the API server's event loop.

`gpudock server` registers it as a platform sidecar, so it starts and stops with
the API (`api.app` lifespan). Database and engine calls run in the gateway's own
thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import asyncssh

from gpudock.errors import GpudockError
from gpudock.services.context import ServiceContext
from gpudock.services.ssh import endpoint as ssh_endpoint
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.sshgw.listener import TcpListener
from gpudock.sshgw.ratelimit import SshGates
from gpudock.sshgw.server import GatewayConnection

log = logging.getLogger(__name__)
T = TypeVar("T")
WORKERS = 32
STOP_DEADLINE_S = 10.0
EXIT_POLL_DEADLINE_S = 10.0
# Without chacha20-poly1305, which OpenSSH clients prefer but which costs asyncssh
# ~40 % more CPU per byte than AES (bench/ssh_throughput.py): clients then pick
# aes128-ctr or AES-GCM, which every SSH client since 2013 offers.
CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
)


class SshGateway:
    def __init__(self, ctx: ServiceContext, *, sock: socket.socket | None = None) -> None:
        """`sock`: an already bound listening socket (tests); else settings' host and port."""
        self.ctx = ctx
        self.limits = SshGates.from_settings(ctx.settings)
        self._sock = sock
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._connections: set[GatewayConnection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        assert self._acceptor is not None, "the gateway is not started"
        return int(self._acceptor.get_port())

    # -- lifecycle (a platform Sidecar) ------------------------------------------------------
    async def start(self) -> None:
        settings = self.ctx.settings
        self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpudock-ssh")
        host_key = await self.call(ssh_endpoint.ensure_host_key, settings)
        abandoned = await self.call(ssh_sessions.close_abandoned_sessions, self.ctx)
        if abandoned:
            log.warning("closed %d SSH session records left open by a stopped gateway", abandoned)
        self._acceptor = await asyncssh.listen(
            settings.ssh_host,
            settings.ssh_port,
            tunnel=TcpListener(self._sock),  # plain TCP, sends coalesced: see listener.py
            server_factory=lambda: GatewayConnection(self),
            server_host_keys=[str(host_key)],
            server_version="gpudock",
            public_key_auth=True,
            password_auth=False,
            kbdint_auth=False,
            host_based_auth=False,
            gss_host=None,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_pty=True,
            line_editor=False,
            allow_scp=False,
            encoding=None,
            encryption_algs=CIPHERS,
            login_timeout=settings.ssh_login_timeout_s,
            keepalive_interval=settings.ssh_keepalive_interval_s,
            keepalive_count_max=settings.ssh_keepalive_count_max,
        )
        if settings.ssh_port != self.port:  # 0 ("any free port") or a socket from the caller
            settings.ssh_port = self.port  # so that the API prints ssh commands that work
        log.info("SSH gateway listening on %s:%d", settings.ssh_host, self.port)

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for connection in list(self._connections):
            connection.close()
        deadline = asyncio.get_running_loop().time() + STOP_DEADLINE_S
        while self._tasks and asyncio.get_running_loop().time() < deadline:
            await asyncio.wait(set(self._tasks), timeout=STOP_DEADLINE_S)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- used by connections and sessions ------------------------------------------------------
    def register(self, connection: GatewayConnection) -> None:
        self._connections.add(connection)

    def unregister(self, connection: GatewayConnection) -> None:
        self._connections.discard(connection)

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking service call in the gateway's thread pool."""
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    async def audit(self, function: Callable[..., T], *args: Any) -> T | None:
        """An audit write: logged, never raised, if the database fails."""
        try:
            return await self.call(function, self.ctx, *args)
        except GpudockError as exc:
            log.error("SSH audit record lost: %s", exc.message)
        except Exception:
            log.exception("SSH audit record lost")
        return None

    async def best_effort(self, what: str, function: Callable[..., Any], *args: Any) -> None:
        """A service call whose failure is logged, not raised (signals, hang-ups)."""
        try:
            await self.call(function, self.ctx, *args)
        except GpudockError as exc:
            log.warning("could not %s: %s", what, exc.message)

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A background task that is kept alive, logged if it fails, awaited at stop."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("SSH gateway task failed", exc_info=task.exception())

    async def exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code, polled (with a deadline) until the engine has it;
        None if it cannot be had."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_POLL_DEADLINE_S
        delay = 0.005
        while True:
            try:
                status = await self.call(ssh_sessions.exit_code, self.ctx, exec_id)
            except GpudockError as exc:
                log.warning("no exit status for exec %s: %s", exec_id, exc.message)
                return None
            if status is not None or loop.time() > deadline:
                return status
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
