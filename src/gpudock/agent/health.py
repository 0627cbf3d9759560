"""GPU health read where it happens: the agent polls its host's NVML, journals
what it sees, and the link delivers the journal to the server.

    <state dir>/health.json   {"acked": N, "next": M, "pending": [records after N]}

Xid and double-bit ECC events are journaled as they come; a condition NVML
reports on every poll (pending or failed row remapping, a lost GPU) once when
it appears. Each record gets the next number of the journal. Heartbeats carry
the pending records (`gpudock.link.wire.HealthRecord`); the server records
each number once and acknowledges the highest it holds, and only then does the
agent drop them. So a fault seen while the link is down, or while the agent is
restarting, or whose acknowledgement was lost, reaches the server exactly once.
The file is replaced atomically and synced: a killed agent loses nothing it
had journaled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from gpudock.agent.state import write_private_json
from gpudock.errors import GpudockError
from gpudock.gpu.base import GpuSource, HealthEvent
from gpudock.link.wire import MAX_HEALTH_RECORDS, HealthRecord

log = logging.getLogger(__name__)
JOURNAL_FILE = "health.json"
POLL_EVERY_S = 1.0
# Events that happen once each; everything else is a standing condition.
_EVENT_KINDS = frozenset({"xid", "ecc_dbe"})


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HealthJournal:
    """Numbered health records not yet acknowledged by the server, kept on disk.
    Thread-safe: the watcher records from a worker thread, the link reads and
    acknowledges from the event loop."""

    def __init__(self, state_dir: Path, clock: Callable[[], datetime] = _utc_now) -> None:
        self.path = state_dir / JOURNAL_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self._acked, self._next, self._pending = 0, 1, list[HealthRecord]()
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            pending = [HealthRecord.model_validate(r) for r in data["pending"]]
            acked, following = int(data["acked"]), int(data["next"])
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            # Starting empty is the only way on; the server's acknowledgement puts the
            # numbering back above what it holds (see `acknowledge`).
            kept = self.path.with_suffix(".damaged")
            self.path.replace(kept)
            log.error("health journal %s is damaged (%s): kept as %s", self.path, exc, kept)
            return
        self._acked, self._next, self._pending = acked, following, pending

    def record(self, events: list[HealthEvent]) -> list[HealthRecord]:
        """Journal `events` (blocking: the file is written and synced); the records."""
        if not events:
            return []
        at = self._clock()
        with self._lock:
            records = [
                HealthRecord(
                    seq=self._next + offset,
                    gpu_uuid=event.gpu_uuid,
                    kind=event.kind,
                    xid=event.xid,
                    message=event.message[:500],
                    seen_at=at,
                )
                for offset, event in enumerate(events)
            ]
            self._pending += records
            self._next += len(records)
            self._save()
        return records

    def pending(self) -> list[HealthRecord]:
        """The oldest records the server has not acknowledged (one heartbeat's worth)."""
        with self._lock:
            return self._pending[:MAX_HEALTH_RECORDS]

    def acknowledge(self, through: int) -> bool:
        """The server holds every record up to `through`; True if records remain to
        send after this acknowledgement changed the journal (send them now).

        A number at or above this journal's next one means the server knew an
        earlier journal of this host (this one was lost or damaged): it recorded
        none of ours, which are numbered again above its number, not dropped."""
        with self._lock:
            if through >= self._next:
                self._pending = [
                    record.model_copy(update={"seq": through + 1 + position})
                    for position, record in enumerate(self._pending)
                ]
                self._acked, self._next = through, through + 1 + len(self._pending)
            elif through > self._acked:
                self._pending = [r for r in self._pending if r.seq > through]
                self._acked = through
            else:
                return False
            self._save()
            return bool(self._pending)

    def _save(self) -> None:
        data = {
            "acked": self._acked,
            "next": self._next,
            "pending": [r.model_dump(mode="json") for r in self._pending],
        }
        write_private_json(self.path, data)


class HealthWatcher:
    """Polls the GPU source every `every_s` and journals what is new; `on_new` is
    called (on the event loop) after something was journaled."""

    def __init__(
        self, source: GpuSource, journal: HealthJournal, every_s: float = POLL_EVERY_S
    ) -> None:
        self.source = source
        self.journal = journal
        self.every_s = every_s
        self._standing: set[tuple[str, str]] = set()
        self._failing = False

    async def watch(self, on_new: Callable[[], None]) -> None:
        """Until cancelled."""
        while True:
            if await asyncio.to_thread(self.poll_once):
                on_new()
            await asyncio.sleep(self.every_s)

    def poll_once(self) -> list[HealthRecord]:
        """One poll: journal what is new; the records journaled. Blocking."""
        try:
            events = self.source.poll_health(0)
        except GpudockError as exc:
            if not self._failing:  # once per outage, not once a second
                log.error("cannot read GPU health: %s", exc.message)
            self._failing = True
            return []
        if self._failing:
            log.info("GPU health readable again")
        self._failing = False
        return self.journal.record(self._news(events))

    def _news(self, events: list[HealthEvent]) -> list[HealthEvent]:
        """Every one-off event; a standing condition only in the poll it appears in."""
        standing = {(e.gpu_uuid, e.kind) for e in events if e.kind not in _EVENT_KINDS}
        news = [
            e
            for e in events
            if e.kind in _EVENT_KINDS or (e.gpu_uuid, e.kind) not in self._standing
        ]
        self._standing = standing
        return news
