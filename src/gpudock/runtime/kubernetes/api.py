"""The Kubernetes API through the official client, in gpudock's terms: one
connection (a kubeconfig, or the service account of the pod gpudock runs in),
calls that answer plain JSON dicts (the objects as the apiserver wrote them,
no model round trip), and the one place where the client's and urllib3's
exceptions become `gpudock.errors`.

Every collaborator of `KubernetesRuntime` calls the API inside `translated()`,
so no `kubernetes` exception leaves `gpudock.runtime.kubernetes`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3.exceptions
from kubernetes import client, config, watch
from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.api.networking_v1_api import NetworkingV1Api
from kubernetes.client.api.version_api import VersionApi
from kubernetes.client.exceptions import ApiException

from gpudock.errors import RuntimeFailure, RuntimeUnavailable

Obj = dict[str, Any]
UNREACHABLE_HINT = "is the cluster up and GPUDOCK_KUBECONFIG right?"
NOT_FOUND, CONFLICT, GONE = 404, 409, 410


class Missing(Exception):
    """The object does not exist (404): callers turn it into their contract's answer."""


class Exists(Exception):
    """An object of that name exists already (409 AlreadyExists)."""


@dataclass
class KubeApi:
    """The typed API groups gpudock uses, over one `ApiClient`."""

    client: client.ApiClient
    core: CoreV1Api
    networking: NetworkingV1Api
    version: VersionApi
    timeout_s: float

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """`method` (a CoreV1Api or NetworkingV1Api method) answered as a dict;
        `Missing` for a 404, `Exists` for a 409 AlreadyExists, `ApiException` else."""
        try:
            response = method(
                *args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs
            )
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                raise Missing(_message(exc)) from exc
            if exc.status == CONFLICT and _reason(exc) == "AlreadyExists":
                raise Exists(_message(exc)) from exc
            raise
        body = response.data
        found: Obj = json.loads(body) if body else {}
        return found

    def watch(
        self, method: Callable[..., Any], *args: Any, timeout_s: float, **kwargs: Any
    ) -> Iterator[tuple[str, Obj]]:
        """(event type, object) from a watch that ends after `timeout_s`; an
        expired resourceVersion is `ApiException` 410 (list again, then watch)."""
        # The watch module is untyped: its events are dicts of the JSON lines.
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            method,
            *args,
            timeout_seconds=max(1, int(timeout_s)),
            _request_timeout=timeout_s + self.timeout_s,
            deserialize=False,
            **kwargs,
        )
        for event in stream:
            yield str(event["type"]), event["object"]

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]  # the client's own method


def connect(kubeconfig: Path | None, context: str | None, timeout_s: float) -> KubeApi:
    """The client for `kubeconfig` (and its `context`), or, without one, the
    service account of the pod this server runs in."""
    with translated("connect to the Kubernetes API"):
        try:
            if kubeconfig is not None:
                api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig), context=context, persist_config=False
                )
            else:
                configuration = client.Configuration()
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
                api_client = client.ApiClient(configuration)
        except config.ConfigException as exc:
            raise RuntimeUnavailable(f"could not read the Kubernetes credentials: {exc}") from exc
    return KubeApi(
        api_client,
        CoreV1Api(api_client),
        NetworkingV1Api(api_client),
        VersionApi(api_client),
        timeout_s,
    )


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Raise the client's errors as `RuntimeFailure` (the API answered with an
    error: its own message) or `RuntimeUnavailable` (it could not be reached,
    or said it cannot serve now: 429, 5xx); `action` completes "could not …"."""
    try:
        yield
    except ApiException as exc:
        if exc.status is not None and (exc.status == 429 or exc.status >= 500):
            raise RuntimeUnavailable(f"could not {action}: {_message(exc)}") from exc
        if exc.status in (401, 403):
            raise RuntimeFailure(
                f"could not {action}: the Kubernetes API refused gpudock's credentials "
                f"({_message(exc)}); check the service account's permissions"
            ) from exc
        raise RuntimeFailure(f"could not {action}: {_message(exc)}") from exc
    except (Missing, Exists) as exc:
        raise RuntimeFailure(f"could not {action}: {exc}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise RuntimeUnavailable(
            f"could not {action}: the Kubernetes API is unreachable ({exc}); {UNREACHABLE_HINT}"
        ) from exc


def _status_body(exc: ApiException) -> Obj:
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _message(exc: ApiException) -> str:
    """The apiserver's own words (a `Status` message), else the HTTP reason."""
    return str(_status_body(exc).get("message") or f"{exc.status} {exc.reason}")


def _reason(exc: ApiException) -> str:
    return str(_status_body(exc).get("reason") or "")


def expired(exc: ApiException) -> bool:
    return bool(exc.status == GONE)
