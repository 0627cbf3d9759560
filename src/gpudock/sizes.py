"""Byte counts as people read them, in binary units named as such (KiB, MiB, GiB).

Binary because the sizes gpudock sets are binary: an instance's `memory_gb` is
its limit in GiB (`memory_gb × 1024` MiB goes to the engine), NVML reports GPU
memory in MiB, so a 4 GiB limit reads "4.0 GiB", not "4.3 GB". One formatter for
every place a byte count is shown, so that the same number never reads two ways.
"""

from __future__ import annotations

from rich.filesize import pick_unit_and_suffix

BINARY_SUFFIXES = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
MIB = 2**20


def format_size(size_bytes: int, precision: int = 1) -> str:
    """1536 → '1.5 KiB'; whole bytes below 1 KiB ('512 B')."""
    unit, suffix = pick_unit_and_suffix(size_bytes, BINARY_SUFFIXES, 1024)
    if unit == 1:
        return f"{size_bytes} {suffix}"
    return f"{size_bytes / unit:.{precision}f} {suffix}"
