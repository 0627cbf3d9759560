"""How a webhook is signed, and how a receiver checks it (docs/notifications.md).

The signature is HMAC-SHA256, keyed with the endpoint's secret, over
`<timestamp>.<body>`: the timestamp (Unix seconds, its own header) is inside
what is signed, so a captured request cannot be replayed later with a new
one, and a receiver refuses timestamps far from its clock.
"""

from __future__ import annotations

import hashlib
import hmac

DELIVERY_HEADER = "X-Gpudock-Delivery"  # the stable delivery id: de-duplicate on it
KIND_HEADER = "X-Gpudock-Event"
TIMESTAMP_HEADER = "X-Gpudock-Timestamp"
SIGNATURE_HEADER = "X-Gpudock-Signature"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header's value: `v1=<hex digest>`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    header: str,
    now: float,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> bool:
    """What a receiver does: the timestamp is recent and the signature matches
    (compared in constant time)."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, sent, body), header.strip())
