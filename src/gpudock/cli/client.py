"""The one HTTP client of the CLI, and the one error class every command raises
(defined in `cli/failures.py`, re-exported here).

    CliError                  printed in red on stderr, then exit `exit_code`
      (exit 1)                the server or the runtime said no, or cannot be reached
      (exit 2)                the command line or the local configuration is wrong

Every answer is parsed into the server's own response model (`gpudock.api.*_schemas`,
which import nothing but pydantic), so commands read attributes and `--json` prints
the model as the server wrote it. Request bodies stay plain mappings: the server
validates them and says what is wrong in its own words.

httpx exceptions, HTTP error responses and answers that do not fit their model
become CliError here and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Self, TypeVar
from urllib.parse import quote

import click
import httpx
from pydantic import TypeAdapter, ValidationError

from gpudock import __version__
from gpudock.api.schemas import ErrorPublic
from gpudock.cli.config import Config, ConfigError, load_config
from gpudock.cli.failures import EXIT_ERROR as EXIT_ERROR
from gpudock.cli.failures import EXIT_USAGE as EXIT_USAGE
from gpudock.cli.failures import CliError as CliError

API_PREFIX = "/api/v1"
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
LOGIN_HINT = (
    "log in with `gpudock login URL --token T`, or set GPUDOCK_TOKEN "
    "(the first admin's token is in the server's data dir, admin.token)"
)

Answer = TypeVar("Answer")
Body = Mapping[str, object]
Query = Mapping[str, str] | None
"""A query string's parameters, if there are any."""


def quoted_path(*segments: str) -> str:
    """`/a/b/c` with each segment quoted, so that a name or id stays one segment."""
    return "".join("/" + quote(segment, safe="") for segment in segments)


class NotFoundError(CliError):
    """The server answered 404 (waiting for a deletion treats this as done)."""


class ApiClient:
    """Sync JSON calls to `{url}/api/v1`; every failure raises CliError."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: httpx.Timeout = TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        language: str | None = None,
    ) -> None:
        self.url = url
        headers = {
            "User-Agent": f"gpudock-cli/{__version__}",
            "Accept": "application/json",
            "Accept-Language": accept_language(language),
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=url + API_PREFIX, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, into: type[Answer], *, params: Query = None) -> Answer:
        return self.request("GET", path, into, params=params)

    def post(
        self, path: str, into: type[Answer], body: Body | None = None, *, params: Query = None
    ) -> Answer:
        return self.request("POST", path, into, body, params=params)

    def put(self, path: str, into: type[Answer], body: Body, *, params: Query = None) -> Answer:
        return self.request("PUT", path, into, body, params=params)

    def delete(self, path: str, into: type[Answer], *, params: Query = None) -> Answer:
        return self.request("DELETE", path, into, params=params)

    def request(
        self,
        method: str,
        path: str,
        into: type[Answer],
        body: Body | None = None,
        *,
        params: Query = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """Send, then parse the answer into `into` (a response model, or a list of one)."""
        response = self._send(method, path, body, params=params, headers=headers)
        return self._parse(response.content, into, f"{method} {path}")

    def stream(
        self,
        path: str,
        into: type[Answer],
        *,
        params: Query = None,
        content: bytes | None = None,
        body: Body | None = None,
    ) -> Iterator[Answer]:
        """POST, then yield each NDJSON line of the answer as it arrives (builds, validation)."""
        headers = {"Content-Type": "application/x-tar"} if content is not None else None
        try:
            with self._http.stream(
                "POST",
                path,
                params=params,
                content=content,
                json=body,
                headers=headers,
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:
                if response.is_error:
                    response.read()
                    raise _http_error(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield self._parse(line, into, f"POST {path}")
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc

    def get_text(self, path: str, params: Query = None) -> str:
        """GET a non-JSON answer (e.g. CSV) as text."""
        return self._send("GET", path, None, params=params).text

    def delete_empty(self, path: str) -> None:
        """DELETE whose answer is a 204 with no body."""
        self._send("DELETE", path, None)

    def _send(
        self,
        method: str,
        path: str,
        body: Body | None,
        *,
        params: Query = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=body, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        if response.is_error:
            raise _http_error(response)
        return response

    def _parse(self, raw: bytes | str, into: type[Answer], what: str) -> Answer:
        try:
            return TypeAdapter(into).validate_json(raw)
        except ValidationError as exc:
            raise self._unreadable(exc, what) from exc

    def _unreadable(self, exc: ValidationError, what: str) -> CliError:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            return CliError(
                f"the server at {self.url} answered {what} with something other "
                "than JSON: is that URL a gpudock server?"
            )
        field = ".".join(str(part) for part in first["loc"]) or "the body"
        return CliError(
            f"the server at {self.url} answered {what} with a body this CLI cannot read "
            f"({field}: {first['msg']})",
            hint="the CLI and the server should be the same gpudock version",
        )

    def _transport_error(self, exc: httpx.HTTPError) -> CliError:
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            return CliError(f"bad server URL {self.url!r}: {exc}", exit_code=EXIT_USAGE)
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return CliError(
                f"cannot reach the gpudock server at {self.url}: is `gpudock server` running?",
                hint="start it with `gpudock server`, or point GPUDOCK_URL (or `gpudock login`) "
                "at the right address",
            )
        if isinstance(exc, httpx.TimeoutException):
            kind = exc.__class__.__name__
            return CliError(f"the gpudock server at {self.url} did not answer in time ({kind})")
        return CliError(f"lost the connection to the gpudock server at {self.url}: {exc}")


def _http_error(response: httpx.Response) -> CliError:
    message = _error_message(response)
    status = response.status_code
    if status == 401:
        return CliError(message, hint=LOGIN_HINT)
    if status == 404:
        return NotFoundError(message)
    if status == 403:
        return CliError(message, hint="ask an admin, or use an admin token")
    if status >= 500:
        return CliError(message, hint="the server's log says more")
    return CliError(message)


def _error_message(response: httpx.Response) -> str:
    """The server's error message, or the status line for anything else."""
    try:
        return ErrorPublic.model_validate_json(response.content).error.message
    except ValidationError:
        pass
    text = response.text.strip()[:200]
    reason = f"HTTP {response.status_code} {response.reason_phrase}"
    return f"the server answered {reason}" + (f": {text}" if text else "")


def resolve_config() -> Config:
    try:
        return load_config()
    except ConfigError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from exc


def connect(*, require_token: bool = True) -> ApiClient:
    """A client for the configured server; without a token, fail before any request."""
    config = resolve_config()
    if require_token and not config.token:
        raise CliError(f"no API token for {config.url}", hint=LOGIN_HINT)
    return ApiClient(config.url, config.token, language=_lang_option())


def _lang_option() -> str | None:
    """`gpudock --lang X …`, read from the running command's root context."""
    context = click.get_current_context(silent=True)
    value = context.find_root().params.get("lang") if context is not None else None
    return value if isinstance(value, str) else None


def accept_language(explicit: str | None = None) -> str:
    """The Accept-Language the CLI sends: --lang, else the locale (LC_ALL, then
    LC_MESSAGES, then LANG, as gettext reads them); English when it says nothing
    we have. The server words its errors and reasons in it; codes stay English."""
    tag = explicit
    if not tag:
        for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
            tag = os.environ.get(name)
            if tag:
                break
    tag = (tag or "").split(".")[0].split("@")[0].replace("_", "-")
    if tag.lower().startswith("zh"):
        return "zh-CN, en;q=0.5"
    return "en"
