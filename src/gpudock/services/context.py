"""What every service needs, built once by the app factory."""

from __future__ import annotations

import os
import secrets
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar, cast

from sqlalchemy.orm import Session, sessionmaker

from gpudock.gpu.base import GpuSource
from gpudock.runtime.base import Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.link import HostRuntimes
from gpudock.services.foreground import Foreground
from gpudock.settings import Settings

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Memo:
    """What a process keeps between requests and passes, one object of each kind,
    made on first use. Each kind lives beside what it caches and says what
    invalidates it (`services.fleet.shape`, `services.accounts.tokens`); kept
    here, one per context, so that two platforms in one process (tests) never
    share a copy, and no domain has to import another's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[type, object] = {}

    def get(self, kind: type[T]) -> T:
        with self._lock:
            made = self._made.get(kind)
            if made is None:
                made = self._made[kind] = kind()
        return cast(T, made)


@dataclass
class ServiceContext:
    settings: Settings
    sessions: sessionmaker[Session]
    runtime: Runtime
    gpu_source: GpuSource
    cluster_id: str = ""
    read_sessions: sessionmaker[Session] | None = None
    clock: Callable[[], datetime] = utc_now
    wake_reconciler: Callable[[], None] = field(default=lambda: None)
    lease_owner: str = field(default_factory=lambda: secrets.token_hex(6))
    """Who holds this process's row leases (`services.leases`); the platform
    sets the server's lasting id."""
    pass_durations: dict[str, float] = field(default_factory=dict)
    """Seconds each background pass took the last time it ran (the reconciler
    writes it, Prometheus reads it)."""
    memo: Memo = field(default_factory=Memo)
    foreground: Foreground = field(default_factory=Foreground)
    """The requests being answered; background passes step aside for them."""
    hosts: HostRuntimes | None = None
    """Agent hosts' runtimes (the platform makes it; the agent gateway attaches
    each link). None: every host is on `runtime`."""

    def runtime_for(self, host_id: str | None, scope: InstanceScope | None = None) -> Runtime:
        """The runtime that acts on `host_id`: its agent's link for an agent host
        (each call carrying `scope`), else `runtime`, this server's engine."""
        if self.hosts is None:
            return self.runtime
        return self.hosts.for_host(host_id, scope)

    def runtime_for_exec(self, exec_id: str) -> Runtime:
        """The runtime that started exec `exec_id` (resizes, exit codes)."""
        return self.runtime if self.hosts is None else self.hosts.for_exec(exec_id)

    def every_engine(self) -> list[Runtime]:
        """`runtime` and each linked agent host's: where containers may be."""
        return [self.runtime] if self.hosts is None else self.hosts.every_engine()

    def reader(self) -> Session:
        """A session for queries only (no write lock on SQLite)."""
        return (self.read_sessions or self.sessions)()

    def crash_point(self, name: str) -> None:
        """Test hook: SIGKILL this process at a named point (never set in production)."""
        if name in self.settings.crash_point_set:
            os.kill(os.getpid(), signal.SIGKILL)
