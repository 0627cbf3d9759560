"""What crosses the proxy: gpudock's own credentials never reach an instance,
and an instance cannot set gpudock's cookies.

Towards the instance: hop-by-hop headers go, and so do every `gpudock_*`
cookie (the console session, the link cookie, the CSRF and language cookies),
an `Authorization` carrying a gpudock API token, and `X-Gpudock-*` headers;
JupyterLab gets the instance's service token as `Authorization: token …`
instead. `X-Forwarded-*` say where the request came from.

Back to the browser: hop-by-hop headers go, and so does any `Set-Cookie` for
a `gpudock_*` name — on the console's origin (path-prefix mode) an instance
could otherwise plant a console session of its choosing.
"""

from __future__ import annotations

COOKIE_PREFIX = "gpudock_"
OWN_HEADER_PREFIX = b"x-gpudock-"
API_TOKEN_PREFIX = "bearer gpd_"  # noqa: S105 (a prefix, not a secret)
Headers = list[tuple[bytes, bytes]]
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)


def _connection_tokens(headers: Headers) -> set[bytes]:
    named = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named |= {t.strip().lower() for t in value.split(b",") if t.strip()}
    return named


def without_gpudock_cookies(value: str) -> str:
    kept = [
        part.strip()
        for part in value.split(";")
        if part.strip() and not part.strip().startswith(COOKIE_PREFIX)
    ]
    return "; ".join(kept)


def to_instance(
    headers: Headers,
    *,
    client: str,
    scheme: str,
    host: str,
    prefix: str,
    service_token: str | None,
) -> Headers:
    """The request's headers as the instance gets them (see the module's docstring)."""
    dropped = HOP_BY_HOP | _connection_tokens(headers)
    out: Headers = []
    for name, value in headers:
        lower = name.lower()
        if lower in dropped or lower.startswith(OWN_HEADER_PREFIX):
            continue
        if lower.startswith(b"x-forwarded-"):
            continue  # ours replace whatever the client claimed
        if lower == b"cookie":
            kept = without_gpudock_cookies(value.decode("latin-1"))
            if kept:
                out.append((b"cookie", kept.encode("latin-1")))
            continue
        if lower == b"authorization" and (
            service_token is not None
            or value.decode("latin-1").lower().startswith(API_TOKEN_PREFIX)
        ):
            continue
        out.append((lower, value))
    if service_token is not None:
        out.append((b"authorization", f"token {service_token}".encode()))
    out += [
        (b"x-forwarded-for", client.encode()),
        (b"x-forwarded-proto", scheme.encode()),
        (b"x-forwarded-host", host.encode("latin-1")),
    ]
    if prefix:
        out.append((b"x-forwarded-prefix", prefix.rstrip("/").encode()))
    return out


def to_browser(headers: Headers) -> Headers:
    """The instance's response headers as the browser gets them."""
    dropped = HOP_BY_HOP | _connection_tokens(headers)
    out: Headers = []
    for name, value in headers:
        lower = name.lower()
        if lower in dropped:
            continue
        if lower == b"set-cookie" and value.lstrip().lower().startswith(COOKIE_PREFIX.encode()):
            continue
        out.append((lower, value))
    return out
