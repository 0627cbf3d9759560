"""The proxy's per-address request limit, counted in fixed windows in memory.

Not `services.rate_limits.RateGate`: its moving window (the `limits` package's
memory storage) starts a timer thread for expiry whenever its last one has
run out, which on a page's sequential requests is most of them — a thread
start per request on the path every byte of a notebook takes. Here each
address has one counter per limit and window; a window's counts reset when it
ends, so a burst that straddles two windows may pass up to twice a limit (the
limit stops floods, not a precise rate). Same notation and settings as the
API's limits ("300/second;9000/minute").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from limits import parse_many

from gpudock.errors import RateLimited

MAX_ADDRESSES = 100_000  # past it, the oldest windows are dropped


class AddressRates:
    def __init__(self, name: str, spec: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._limits = [(item.amount, float(item.get_expiry())) for item in parse_many(spec)]
        self._clock = clock
        # address → [window start, count] per limit, in the order of `_limits`
        self._windows: dict[str, list[list[float]]] = {}

    def check(self, address: str) -> None:
        """Count one request from `address`, or raise `RateLimited` (not counted)."""
        now = self._clock()
        windows = self._windows.get(address)
        if windows is None:
            if len(self._windows) >= MAX_ADDRESSES:
                self._forget_ended(now)
            windows = self._windows[address] = [[now, 0.0] for _ in self._limits]
        wait = 0.0
        for (amount, seconds), window in zip(self._limits, windows, strict=True):
            if now - window[0] >= seconds:
                window[0], window[1] = now, 0.0
            elif window[1] >= amount:
                wait = max(wait, window[0] + seconds - now)
        if wait:
            seconds_left = max(1, math.ceil(wait))
            raise RateLimited(
                f"too many {self.name} ({address}); retry in {seconds_left} s",
                retry_after_s=seconds_left,
            )
        for window in windows:
            window[1] += 1

    def _forget_ended(self, now: float) -> None:
        longest = max(seconds for _, seconds in self._limits)
        for address, windows in list(self._windows.items()):
            if all(now - w[0] >= longest for w in windows):
                del self._windows[address]
        if len(self._windows) >= MAX_ADDRESSES:
            self._windows.clear()
