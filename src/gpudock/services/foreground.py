"""Requests first: the heavy background passes step aside while requests are answered.

One process answers requests and runs the background passes, and they share one
interpreter lock. A pass that computes while a request is answered makes the
request wait for that lock after every database call and socket write (up to
the interpreter's switch interval, 5 ms, each time). The API counts the
requests it is answering (`api.foreground`); the charging and sampling passes,
which run for a second or more at a time over thousands of rows and are due
within a period rather than at a moment, call `step_aside()` between their
short pieces of work: it waits, at most `max_wait_s` each time, while a young
request is in flight. A request older than `young_s` (a long poll, a download)
no longer holds them back, and neither does a stream of requests for longer
than `max_wait_s`: the passes slow down under load, they never stop.
"""

from __future__ import annotations

import itertools
import threading
import time


class Foreground:
    """The requests in flight, by when each began."""

    def __init__(self, *, young_s: float = 1.0, max_wait_s: float = 0.05) -> None:
        self.young_s = young_s
        self.max_wait_s = max_wait_s
        self._began: dict[int, float] = {}
        self._tickets = itertools.count()
        self._changed = threading.Condition()

    def enter(self) -> int:
        """A request begins; returns its ticket for `leave`."""
        ticket = next(self._tickets)
        with self._changed:
            self._began[ticket] = time.monotonic()
        return ticket

    def leave(self, ticket: int) -> None:
        with self._changed:
            self._began.pop(ticket, None)
            if not self._began:
                self._changed.notify_all()

    def busy(self) -> bool:
        """Whether a request that began less than `young_s` ago is in flight."""
        with self._changed:
            return self._young_in_flight()

    def step_aside(self) -> float:
        """Wait while a young request is in flight, at most `max_wait_s`;
        returns the seconds waited."""
        if not self._began:  # the common case when idle, without the lock
            return 0.0
        began = time.monotonic()
        deadline = began + self.max_wait_s
        with self._changed:
            while (left := deadline - time.monotonic()) > 0 and self._young_in_flight():
                self._changed.wait(left)
        return time.monotonic() - began

    def _young_in_flight(self) -> bool:  # with `_changed` held
        young_since = time.monotonic() - self.young_s
        return any(began > young_since for began in self._began.values())
