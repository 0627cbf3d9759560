"""The one domain error tree, with the HTTP status of each kind.

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
what was wrong and what to do about it. Its `http_status` is the one mapping
to HTTP: the API answers JSON with it (`api.errors`), the web console renders
its error pages with it (`web.deps`); a subclass inherits its parent's.
"""

from __future__ import annotations

from typing import Any


class GpudockError(Exception):
    code = "error"
    http_status = 500

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details


class InvalidRequest(GpudockError):
    code = "invalid_request"
    http_status = 422


class Unauthenticated(GpudockError):
    code = "unauthenticated"
    http_status = 401


class Forbidden(GpudockError):
    code = "forbidden"
    http_status = 403


class NotFound(GpudockError):
    code = "not_found"
    http_status = 404


class Conflict(GpudockError):
    code = "conflict"
    http_status = 409


class PaymentRequired(GpudockError):
    code = "payment_required"
    http_status = 402


class PayloadTooLarge(GpudockError):
    code = "payload_too_large"
    http_status = 413


class RateLimited(GpudockError):
    """Too many requests from one token or address; `retry_after_s` says when to retry."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after_s = max(1, retry_after_s)


class RuntimeFailure(GpudockError):
    code = "runtime_failure"
    http_status = 502


class RuntimeUnavailable(RuntimeFailure):
    code = "runtime_unavailable"
    http_status = 503
