"""Waiting for an instance to change without polling (`GET
/instances/{id}/wait`, the CLI's `--wait`).

`switch_instance_status` marks its session; once that session commits, every
waiter in this process is woken at once (`InstanceChanges`, attached to the
context's sessionmaker by the platform). A change another server made on the
same database (the HA topology) wakes nobody here: a waiter reads again every
`RECHECK_S` whatever happens, so it sees that change that much later at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")
MARK = "gpudock.instance_changed"
RECHECK_S = 1.0


def mark_changed(session: Session) -> None:
    """An instance's status or reason changes in this session's transaction."""
    session.info[MARK] = True


class InstanceChanges:
    """The waiters of one process, each an asyncio event on its own loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._attached: set[int] = set()

    def attach(self, sessions: sessionmaker[Session]) -> None:
        """Wake the waiters after every commit of `sessions` that changed an instance."""
        if id(sessions) in self._attached:
            return
        self._attached.add(id(sessions))
        event.listen(sessions, "after_commit", self._after_commit)
        event.listen(sessions, "after_rollback", lambda s: s.info.pop(MARK, None))

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(MARK, False):
            self.notify()

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, changed in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(changed.set)

    def waiting(self) -> int:
        """How many wait now."""
        with self._lock:
            return len(self._waiters)

    @contextlib.contextmanager
    def subscription(self) -> Iterator[asyncio.Event]:
        """An event set on each change, for as long as the block runs (on a loop)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(waiter)
        try:
            yield waiter[1]
        finally:
            with self._lock:
                self._waiters.discard(waiter)


async def wait_until(
    changes: InstanceChanges,
    read: Callable[[], T],
    done: Callable[[T], bool],
    timeout_s: float,
) -> T:
    """`read()` (in a thread) again after each change, until `done` says so or
    `timeout_s` passes; the last read."""
    deadline = time.monotonic() + timeout_s
    with changes.subscription() as changed:
        while True:
            changed.clear()  # before the read: a change during it is not lost
            current = await asyncio.to_thread(read)
            left = deadline - time.monotonic()
            if done(current) or left <= 0:
                return current
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(RECHECK_S, left))
