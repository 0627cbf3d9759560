"""Rate limits shared by the entry points (API, web console login, SSH gateway).

A `RateGate` is one named set of limits ("100/second;3000/minute", the `limits`
notation) over many keys (a token digest, a client address, a key fingerprint),
counted in a moving window in this process's memory. Each entry point builds
its own gates from the settings in its factory; nothing is shared between
processes, so a cluster of API servers multiplies the limits by its size.
"""

from __future__ import annotations

import hashlib
import math
import time

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from gpudock.errors import RateLimited


class RateGate:
    def __init__(self, name: str, spec: str) -> None:
        """`name` says what is limited ("API requests per token"); `spec` the limits."""
        self.name = name
        self._items: list[RateLimitItem] = parse_many(spec)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def hit(self, key: str) -> int | None:
        """Count one event for `key`; None if it is within every limit, else the
        whole seconds until it would be (the event is then not counted)."""
        waits = []
        for item in self._items:
            if not self._limiter.test(item, self.name, key):
                reset = self._limiter.get_window_stats(item, self.name, key).reset_time
                waits.append(max(1, math.ceil(reset - time.time())))
        if waits:
            return max(waits)
        for item in self._items:
            self._limiter.hit(item, self.name, key)
        return None

    def check(self, key: str, shown: str | None = None) -> None:
        """Count one event for `key`, or raise `RateLimited` (`shown`: the key as the
        message may show it, e.g. an address; never a secret)."""
        wait = self.hit(key)
        if wait is not None:
            which = f" ({shown})" if shown else ""
            raise RateLimited(f"too many {self.name}{which}; retry in {wait} s", retry_after_s=wait)


def token_key(token: str) -> str:
    """Gates keep a digest of a bearer token, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def address_of(client_address: str) -> str:
    """'192.0.2.1:51234' or '::1:51234' → the host part (the port changes per connection)."""
    host, sep, port = client_address.rpartition(":")
    return host if sep and port.isdigit() else client_address
