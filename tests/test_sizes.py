"""Byte counts in binary units, named as such."""

from __future__ import annotations

import pytest

from gpudock.sizes import format_size


@pytest.mark.parametrize(
    ("size", "precision", "text"),
    [
        (0, 1, "0 B"),
        (1023, 1, "1023 B"),
        (1024, 1, "1.0 KiB"),
        (1536, 1, "1.5 KiB"),
        (512 * 2**20, 1, "512.0 MiB"),
        (90 * 2**30, 1, "90.0 GiB"),  # a 90 GB (memory_gb) limit: 90 × 1024 MiB
        (81920 * 2**20, 0, "80 GiB"),  # an A100-80GB as NVML counts it
        (3 * 2**40, 1, "3.0 TiB"),
    ],
)
def test_sizes_read_in_binary_units(size: int, precision: int, text: str) -> None:
    assert format_size(size, precision) == text
