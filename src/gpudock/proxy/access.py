"""Who may open a service URL, and which service a request addresses.

Credentials, in order: a link token (the `gpudock_link` cookie a link's first
visit sets), then the console session cookie. Neither valid → the caller is
unauthenticated (a browser goes to the login page); valid but not the owner's
nor an admin's → the service does not exist (404), as for a wrong id.

A check costs a database read; its answer is kept for
`GPUDOCK_SERVICE_AUTH_CACHE_S` (5 s) under a digest of the credentials, so a
page's burst of requests costs one, and a revoked link or ended login stops
working within that time (connections already open stay until they close).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass

from gpudock.errors import Unauthenticated
from gpudock.services.accounts import logins
from gpudock.services.context import ServiceContext
from gpudock.services.instances import published
from gpudock.services.instances.published import ProxyTarget

LINK_COOKIE = "gpudock_link"
MAX_CACHED = 10_000


@dataclass(frozen=True)
class Addressed:
    """The service a request names, and the path below the service's root."""

    instance_ref: str
    service: str
    prefix: str  # what the browser's path starts with: '/i/<ref>/<service>', or ''
    rest: str  # the path below it, '/…' (raw, still percent-encoded)


def from_path(raw_path: str) -> Addressed | None:
    """`/i/<ref>/<service>/<rest>`; None for any other path."""
    if not raw_path.startswith(published.URL_PREFIX):
        return None
    parts = raw_path[len(published.URL_PREFIX) :].split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    ref, service = parts[0], parts[1]
    rest = "/" + parts[2] if len(parts) == 3 else ""
    return Addressed(ref, service, f"{published.URL_PREFIX}{ref}/{service}", rest)


def from_host(host: str, domain: str | None, raw_path: str) -> Addressed | None:
    """`<service>-<instance id>.<domain>`; None for any other host (the console's)."""
    if not domain:
        return None
    name = host.lower()
    suffix = "." + domain
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    service, sep, instance_id = label.partition("-")
    if not sep or "." in label or not instance_id:
        return None
    return Addressed(instance_id, service, "", raw_path or "/")


def _digest(value: str | None) -> str:
    return hashlib.sha256(value.encode()).hexdigest() if value else ""


class Gatekeeper:
    """Answers "may these credentials open this service?" (see the module's docstring)."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._ttl = ctx.settings.service_auth_cache_s
        self._cache: dict[tuple[str, str, str, str], tuple[float, ProxyTarget]] = {}

    async def authorise(
        self, session_cookie: str | None, link_token: str | None, ref: str, service: str
    ) -> ProxyTarget:
        """The target, or the domain error that says why not (Unauthenticated,
        NotFound, Conflict for a stopped instance)."""
        key = (_digest(session_cookie), _digest(link_token), ref, service)
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        target = await asyncio.to_thread(self._check, session_cookie, link_token, ref, service)
        if self._ttl > 0:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = (now + self._ttl, target)
        return target

    def _check(
        self, session_cookie: str | None, link_token: str | None, ref: str, service: str
    ) -> ProxyTarget:
        if link_token:
            try:
                return published.target_for_link(self._ctx, link_token, ref, service)
            except Unauthenticated:
                if not session_cookie:
                    raise
        viewer = logins.resolve_session(self._ctx, session_cookie)
        if viewer is None:
            raise Unauthenticated("log in to the console, or open a link the owner shared")
        return published.target_for_user(self._ctx, viewer.user, ref, service)

    def check_link(self, token: str, ref: str, service: str) -> ProxyTarget:
        """A link's first visit (blocking: call it in a thread)."""
        return published.target_for_link(self._ctx, token, ref, service)
