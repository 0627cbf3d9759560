"""The one domain error tree; `api.errors` maps it to HTTP in one place.

    GpudockError
     ├── InvalidRequest        bad input the user can fix            → 422
     ├── Unauthenticated       missing or unknown token               → 401
     ├── Forbidden             authenticated, but not allowed         → 403
     ├── NotFound              unknown id, or another tenant's        → 404
     ├── Conflict              valid input, wrong state for it        → 409
     ├── PaymentRequired       balance or budget does not cover it    → 402
     ├── PayloadTooLarge       an upload over its limit               → 413
     ├── RateLimited           too many requests; retry later         → 429
     └── RuntimeFailure        the container engine failed            → 502
          └── RuntimeUnavailable   the engine cannot be reached       → 503

Every error carries a stable machine-readable `code` and a message that says
what was wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any


class GpudockError(Exception):
    code = "error"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details


class InvalidRequest(GpudockError):
    code = "invalid_request"


class Unauthenticated(GpudockError):
    code = "unauthenticated"


class Forbidden(GpudockError):
    code = "forbidden"


class NotFound(GpudockError):
    code = "not_found"


class Conflict(GpudockError):
    code = "conflict"


class PaymentRequired(GpudockError):
    code = "payment_required"


class PayloadTooLarge(GpudockError):
    code = "payload_too_large"


class RateLimited(GpudockError):
    """Too many requests from one token or address; `retry_after_s` says when to retry."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after_s = max(1, retry_after_s)


class RuntimeFailure(GpudockError):
    code = "runtime_failure"


class RuntimeUnavailable(RuntimeFailure):
    code = "runtime_unavailable"
