"""API tokens this server has read lately: token hash → the row's facts and its user.

Every API request presents a token; reading its row and user is a join and two
ORM objects, a few per cent of a busy server's CPU. Here a token that was read
is reused for `GPUDOCK_TOKEN_CACHE_S`, checked at each use as if it had just
been read (its expiry against the clock, the user's state), then read again.

What must take effect at once does, on this server: a revoke, a disable, an
enable or a delete calls `forget_all()` once its transaction has committed,
and a read that began before that call is never stored (the epoch it started
at has passed), so no request after the change can meet the old row. Another
server on the same database keeps its copy for at most `GPUDOCK_TOKEN_CACHE_S`
(5 s by default; 0 reads the row on every request, for a topology that wants a
revoke seen everywhere at once). Unknown tokens are never remembered: a token
just created works at once everywhere.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from gpudock.db.models import UserModel

MAX_ENTRIES = 50_000  # past this, start afresh: a bound, not an eviction policy


@dataclass(frozen=True)
class TokenFacts:
    """What authentication reads of a token's row."""

    id: str
    name: str
    expires_at: datetime | None
    revoked_at: datetime | None


@dataclass
class KnownToken:
    facts: TokenFacts
    user: UserModel  # detached: requests read it, none attaches it to a session
    last_used_at: datetime | None  # as last written (by this server, or as read)
    read_at: float  # time.monotonic()


class TokenCache:
    """One per server (`ServiceContext.memo`); safe across request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, KnownToken] = {}
        self._epoch = 0

    def epoch(self) -> int:
        """Take before reading a row, hand to `remember`."""
        with self._lock:
            return self._epoch

    def recall(self, digest: str, max_age_s: float) -> KnownToken | None:
        with self._lock:
            known = self._known.get(digest)
            if known is None or time.monotonic() - known.read_at >= max_age_s:
                return None
            return known

    def remember(self, digest: str, known: KnownToken, epoch: int) -> None:
        """Keep `known` unless something was forgotten since `epoch` (the row may
        have been read before that change committed)."""
        with self._lock:
            if epoch != self._epoch:
                return
            if len(self._known) >= MAX_ENTRIES:
                self._known.clear()
            self._known[digest] = known

    def forget_all(self) -> None:
        """After a commit that revoked a token or changed a user's state."""
        with self._lock:
            self._epoch += 1
            self._known.clear()
