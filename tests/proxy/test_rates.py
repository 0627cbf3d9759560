"""The proxy's per-address limit, on an injected clock."""

from __future__ import annotations

import pytest

from gpudock.errors import RateLimited
from gpudock.proxy.rates import AddressRates


def test_each_limit_counts_in_its_own_window_per_address() -> None:
    now = [1000.0]
    rates = AddressRates("requests", "3/second;5/minute", clock=lambda: now[0])
    for _ in range(3):
        rates.check("10.0.0.1")
    with pytest.raises(RateLimited, match=r"requests \(10.0.0.1\); retry in 1 s"):
        rates.check("10.0.0.1")
    rates.check("10.0.0.2")  # another address has its own counts

    now[0] += 1.0  # the second's window ended; the minute's holds 3 of 5
    rates.check("10.0.0.1")
    rates.check("10.0.0.1")
    with pytest.raises(RateLimited) as refused:
        rates.check("10.0.0.1")
    assert refused.value.retry_after_s == 59

    now[0] += 59.0
    rates.check("10.0.0.1")  # a new minute
