"""Kubernetes quantities ('500m', '8', '64Gi', '1G') as numbers."""

from __future__ import annotations

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


def _number(text: str) -> float:
    for suffix, factor in {**_BINARY, **_DECIMAL}.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def cpus_of(text: str) -> float:
    text = str(text)
    return float(text[:-1]) / 1000 if text.endswith("m") else _number(text)


def bytes_of(text: str) -> int:
    return int(_number(str(text)))
