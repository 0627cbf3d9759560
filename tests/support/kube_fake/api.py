"""The fake apiserver's HTTP side: the REST paths, verbs and query parameters
of the Kubernetes API (`/api/v1/namespaces/{ns}/pods/{name}` and friends),
discovery, watches as chunked JSON lines, and `Status` bodies for failures.

Every object written is checked against the Kubernetes schema of
`SCHEMA_VERSION` (`kubernetes-validate`, strict: an unknown field is refused
as a real apiserver's field validation refuses it), then given the defaults a
real apiserver gives it (`defaults.py`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import kubernetes_validate
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from tests.support.kube_fake import defaults
from tests.support.kube_fake.exec import serve_exec
from tests.support.kube_fake.portforward import serve_portforward
from tests.support.kube_fake.selectors import field_selector, label_selector
from tests.support.kube_fake.statuses import ApiError
from tests.support.kube_fake.store import RESOURCES, Obj, Resource, Store, resource

SCHEMA_VERSION = "1.30"
SERVER_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-gpudock-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-04-17T00:00:00Z",
    "goVersion": "go1.22.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
WATCH_POLL_S = 1.0  # how often a watch stream checks for its end (timeoutSeconds, disconnect)


def _discovery(path: list[str]) -> Obj | None:
    if path == ["version"]:
        return SERVER_VERSION
    if path == ["api"]:
        address = [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": address}
    groups = sorted({r.group for r in RESOURCES if r.group})
    if path == ["apis"]:
        listed = [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"},
            }
            for g in groups
        ]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
    for group, group_version in [("", ["api", "v1"])] + [(g, ["apis", g, "v1"]) for g in groups]:
        if path == group_version:
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/v1" if group else "v1",
                "resources": [_resource_entry(r) for r in RESOURCES if r.group == group],
            }
    return None


def _resource_entry(res: Resource) -> Obj:
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    return {
        "name": res.plural,
        "singularName": res.kind.lower(),
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": verbs,
        "shortNames": list(res.short_names),
    }


class Target:
    """What a path names: a resource, a namespace (or None: all or cluster-scoped),
    an object's name (None: the collection) and a subresource (`status`)."""

    def __init__(self, path: list[str]) -> None:
        if path[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", path[2:]
        elif path[:1] == ["apis"] and len(path) >= 3:
            group, version, rest = path[1], path[2], path[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        self.namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            self.namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        self.res = resource(group, version, rest[0])
        self.name = rest[1] if len(rest) > 1 else None
        self.subresource = rest[2] if len(rest) > 2 else None
        if self.subresource not in (None, "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if self.res.namespaced == (self.namespace is None) and self.name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")


def _validate(res: Resource, obj: Obj) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or ""
    # Absent, they are the endpoint's (the apiserver decodes with its default kind).
    obj.setdefault("kind", res.kind)
    obj.setdefault("apiVersion", res.api_version)
    if obj.get("kind") != res.kind or obj.get("apiVersion") != res.api_version:
        raise ApiError.bad_request(
            f"the API version in the data ({obj.get('apiVersion')}) does not match the "
            f"expected API version ({res.api_version}) or kind {obj.get('kind')!r}"
        )
    pattern = _DNS_LABEL if res.kind in ("Namespace", "Service") else _DNS_SUBDOMAIN
    limit = 63 if res.kind in ("Namespace", "Service") else 253
    if not name:
        raise ApiError.invalid(
            res.kind,
            "",
            [
                (
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                    "metadata.name",
                )
            ],
        )
    if meta.get("name") and (not pattern.match(name) or len(name) > limit):
        what = "label" if limit == 63 else "subdomain"
        why = (
            f'Invalid value: "{name}": a lowercase RFC 1123 {what} must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character"
        )
        raise ApiError.invalid(res.kind, name, [("FieldValueInvalid", why, "metadata.name")])
    try:
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "<root>"
        raise ApiError.invalid(res.kind, name, [("FieldValueInvalid", exc.message, where)]) from exc


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386. Strategic merge patch is taken as this too, its `$patch` and
    `$retainKeys` directives dropped: lists are replaced, not merged by key."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


class FakeApi:
    """The ASGI app over a `Store`; `token`: the bearer token a request that
    carries one must carry."""

    def __init__(self, store: Store, token: str, engine: Any = None) -> None:
        """`engine`: the Docker Engine the kubelet runs pods on (pod exec needs it)."""
        self.store = store
        self.token = token
        self.engine = engine
        self.requests: list[tuple[str, str]] = []  # (method, path?query): what clients sent
        verbs = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        self.app = Starlette(
            routes=[
                WebSocketRoute("/api/v1/namespaces/{namespace}/pods/{pod}/exec", self.exec),
                WebSocketRoute(
                    "/api/v1/namespaces/{namespace}/pods/{pod}/portforward", self.portforward
                ),
                Route("/{path:path}", self.handle, methods=verbs),
            ]
        )

    async def exec(self, websocket: WebSocket) -> None:
        given = websocket.headers.get("authorization")
        if given is not None and given != f"Bearer {self.token}":
            await websocket.close(code=1008, reason="Unauthorized")
            return
        params = websocket.path_params
        await serve_exec(websocket, self.store, self.engine, params["namespace"], params["pod"])

    async def portforward(self, websocket: WebSocket) -> None:
        given = websocket.headers.get("authorization")
        if given is not None and given != f"Bearer {self.token}":
            await websocket.close(code=1008, reason="Unauthorized")
            return
        params = websocket.path_params
        await serve_portforward(
            websocket, self.store, self.engine, params["namespace"], params["pod"]
        )

    async def handle(self, request: Request) -> Response:
        self.requests.append(
            (
                request.method,
                str(request.url.path) + ("?" + request.url.query if request.url.query else ""),
            )
        )
        try:
            # kubectl sends no bearer token over plain HTTP: no header is the anonymous
            # user (allowed everything), a wrong one is refused.
            given = request.headers.get("authorization")
            if given is not None and given != f"Bearer {self.token}":
                raise ApiError.unauthorized()
            path = [p for p in request.url.path.split("/") if p]
            found = _discovery(path)
            if found is not None:
                return JSONResponse(found)
            return await self._resource(request, Target(path))
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.code)

    async def _body(self, request: Request) -> Any:
        try:
            return json.loads(await request.body() or b"{}")
        except ValueError as exc:
            raise ApiError.bad_request(f"error decoding body: {exc}") from exc

    async def _resource(self, request: Request, target: Target) -> Response:
        method, query = request.method, request.query_params
        res, namespace, name = target.res, target.namespace or "", target.name
        if method == "GET" and name is None:
            if query.get("watch") in ("1", "true"):
                return self._watch(target, query)
            match = _both(query)
            items, revision = self.store.list(res, target.namespace, match)
            return JSONResponse(
                {
                    "kind": f"{res.kind}List",
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(revision)},
                    "items": items,
                }
            )
        if method == "GET":
            return JSONResponse(self.store.get(res, namespace, name or ""))
        if method == "POST" and name is None:
            obj = await self._body(request)
            obj.setdefault("metadata", {})
            if res.namespaced:
                given = obj["metadata"].get("namespace")
                if given and given != namespace:
                    raise ApiError.bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
            _validate(res, obj)
            if query.get("dryRun") == "All":
                return JSONResponse(defaults.on_create(res, obj), status_code=201)
            created = self.store.create(res, namespace, defaults.on_create(res, obj))
            return JSONResponse(created, status_code=201)
        if name is None:
            raise ApiError.method_not_allowed()
        if method == "PUT":
            body = await self._body(request)
            return JSONResponse(self._replace(target, body))
        if method == "PATCH":
            return JSONResponse(await self._patch(request, target))
        if method == "DELETE":
            raw = await request.body()
            options = json.loads(raw) if raw else {}
            grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            return JSONResponse(
                self._delete(res, namespace, name, None if grace is None else int(grace))
            )
        raise ApiError.method_not_allowed()

    def _replace(self, target: Target, body: Obj) -> Obj:
        res, namespace, name = target.res, target.namespace or "", target.name or ""

        def change(current: Obj) -> Obj:
            if target.subresource == "status":
                current["status"] = body.get("status", {})
                if body.get("metadata", {}).get("resourceVersion"):
                    current["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
                return current
            replaced = {k: v for k, v in body.items() if k != "status"}  # status: its own
            replaced.setdefault("metadata", {})
            _validate(res, {**replaced, "kind": res.kind, "apiVersion": res.api_version})
            if "status" in current:
                replaced["status"] = current["status"]
            return replaced

        return self.store.update(res, namespace, name, change)

    async def _patch(self, request: Request, target: Target) -> Obj:
        content_type = request.headers.get("content-type", "").split(";")[0]
        if content_type not in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            raise ApiError.unsupported_media(content_type)
        patch = await self._body(request)
        res, namespace, name = target.res, target.namespace or "", target.name or ""

        def change(current: Obj) -> Obj:
            patched: Obj = _merge_patch(current, patch)
            if target.subresource != "status":
                patched.pop("status", None)
                if "status" in current:
                    patched["status"] = current["status"]
                checked = {k: v for k, v in patched.items() if k != "status"}
                checked["metadata"] = {
                    k: v
                    for k, v in patched["metadata"].items()
                    if k in ("name", "namespace", "labels", "annotations", "generateName")
                }
                _validate(res, checked)
            else:
                patched = {**current, "status": patched.get("status", {})}
            if "resourceVersion" not in (patch.get("metadata") or {}):
                patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return patched

        return self.store.update(res, namespace, name, change)

    def _delete(self, res: Resource, namespace: str, name: str, grace: int | None) -> Obj:
        obj = self.store.get(res, namespace, name)
        if res.kind == "Pod" and (obj.get("spec") or {}).get("nodeName") and grace != 0:
            # Graceful: the kubelet stops the containers, then removes the pod.
            default = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            return self.store.mark_deleting(
                res, namespace, name, default if grace is None else grace
            )
        if res.kind == "Namespace":
            for plural, item in self.store.namespaced_keys(name):
                inner = next(r for r in RESOURCES if r.plural == plural)
                with contextlib.suppress(ApiError):
                    self._delete(inner, name, item, None)
            self.store.mark_deleting(res, "", name, 0)
            marked = self.store.update(
                res, "", name, lambda o: {**o, "status": {"phase": "Terminating"}}
            )
            self.store.finalize_namespaces()
            return marked
        removed = self.store.remove(res, namespace, name)
        details = {"name": name, "kind": res.plural, "uid": removed["metadata"]["uid"]}
        if res.group:
            details["group"] = res.group
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _watch(self, target: Target, query: Any) -> Response:
        res, namespace = target.res, target.namespace
        match = _both(query)
        since = query.get("resourceVersion") or ""
        timeout_s = float(query.get("timeoutSeconds") or 1800)

        async def stream() -> AsyncIterator[bytes]:
            revision = int(since) if since not in ("", "0") else None
            if revision is None:  # from now on, the current state first
                items, revision = self.store.list(res, namespace, match)
                for item in items:
                    yield _line("ADDED", item)
            deadline = anyio.current_time() + timeout_s
            while (left := deadline - anyio.current_time()) > 0:
                try:
                    changes, revision = await anyio.to_thread.run_sync(
                        self.store.changes_since,
                        res,
                        revision,
                        namespace,
                        match,
                        min(left, WATCH_POLL_S),
                    )
                except ApiError as exc:
                    yield _line("ERROR", exc.body())
                    return
                for change in changes:
                    yield _line(change.type, change.obj)

        return StreamingResponse(stream(), media_type="application/json")


def _both(query: Any) -> Any:
    labels = label_selector(query.get("labelSelector"))
    fields = field_selector(query.get("fieldSelector"))
    return lambda obj: labels(obj) and fields(obj)


def _line(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"
