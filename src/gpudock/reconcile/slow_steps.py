"""Lifecycle steps that run far longer than a step should: logged with the stack.

A step holds its instance (the loop never starts a second one beside it, and
the lease heartbeat keeps other servers off), so a step stuck in a call shows
from outside only as an instance that stays `creating` or `stopping`. Python
cannot stop a thread, and every runtime call has its own timeout; what this
adds is the one thing an operator needs to act: where the step is waiting.
Each step is reported once, when it passes `limit_s`.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class _Running:
    thread_id: int
    started: float
    reported: bool = False


@dataclass
class StepWatch:
    limit_s: float
    _running: dict[str, _Running] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, instance_id: str) -> None:
        """Called on the step's own thread as it begins."""
        with self._lock:
            self._running[instance_id] = _Running(threading.get_ident(), time.monotonic())

    def finished(self, instance_id: str) -> None:
        with self._lock:
            running = self._running.pop(instance_id, None)
        if running is not None and running.reported:
            took = time.monotonic() - running.started
            log.warning("instance %s: the slow step finished after %.0f s", instance_id, took)

    def report(self) -> list[str]:
        """Log each step over the limit (once, with where its thread is); their ids."""
        now = time.monotonic()
        with self._lock:
            overdue = [
                (instance_id, running)
                for instance_id, running in self._running.items()
                if not running.reported and now - running.started > self.limit_s
            ]
            for _, running in overdue:
                running.reported = True
        frames = sys._current_frames() if overdue else {}
        for instance_id, running in overdue:
            frame = frames.get(running.thread_id)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(gone)\n"
            log.warning(
                "instance %s: its lifecycle step has run %.0f s; it is waiting in:\n%s",
                instance_id,
                now - running.started,
                stack.rstrip(),
            )
        return [instance_id for instance_id, _ in overdue]
