"""Runtime calls as messages: what the server's `LinkRuntime` sends an agent and
what the agent answers, one JSON object a line on the link's command session.

    server                                              agent
      ── {"id": 7, "method": "create_container",  ──▶   scope checked (generation),
          "args": {"spec": {...}},                       then `Runtime.create_container`
          "scope": {"instance": "…", "generation": 3}}   in a worker thread
      ◀── {"id": 7, "result": {...}}                     or {"id": 7, "error":
                                                           {"code": "image_not_found", ...}}

Ids let calls run concurrently on one session: answers come back in the order
the work ends, not the order it was asked. Only the methods of `METHODS` cross
the link — an explicit table, never a name looked up on an object — and each
argument and result is (de)serialised with a pydantic `TypeAdapter` of its
`runtime.base` type, so both ends validate what they receive. An error crosses
as its `code` and message and is raised again as the very `runtime.base` class
(`error_for`); a code this side does not know becomes `RuntimeFailure`.

The scope carries the instance a call acts on and its placement generation;
the agent refuses a generation older than the highest it has seen for that
instance (`StaleGeneration`), so a replayed or late command cannot act on an
instance that has moved on. Nothing here speaks SSH: the link's ends
(`gpudock.agentgw`, `gpudock.agent`) carry the lines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Base64Bytes, BaseModel, TypeAdapter, ValidationError

from gpudock.errors import GpudockError, RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import (
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineInfo,
    ExecResult,
    ImageInfo,
    ImageNotFound,
    NetworkState,
    RegistryUnreachable,
    Runtime,
    RuntimeTimeout,
    StaleGeneration,
    VolumeState,
)

log = logging.getLogger(__name__)
SUBSYSTEM = "gpudock-runtime"

_ERRORS: dict[str, type[RuntimeFailure]] = {
    cls.code: cls
    for cls in (
        RuntimeFailure,
        RuntimeUnavailable,
        ImageNotFound,
        RegistryUnreachable,
        RuntimeTimeout,
        StaleGeneration,
    )
}


class InstanceScope(BaseModel):
    """The instance a call acts on, and its placement generation (see module doc)."""

    instance: str
    generation: int


class CallRequest(BaseModel):
    id: int
    method: str
    args: dict[str, Any]
    scope: InstanceScope | None = None


class CallError(BaseModel):
    code: str
    message: str


class CallResponse(BaseModel):
    id: int
    result: Any = None
    error: CallError | None = None


EXEC_COMMAND = "gpudock-exec "  # an exec channel's command: this, then an `ExecRequest`


class ExecRequest(BaseModel):
    """What an exec channel runs (see `agent.streams`)."""

    container_id: str
    command: list[str]
    env: dict[str, str]
    tty: bool
    scope: InstanceScope | None = None


class ExecOpened(BaseModel):
    """The agent's first line on an exec channel: the exec's id, or why not."""

    exec_id: str | None = None
    code: str | None = None
    message: str = ""


class _ExecResultWire(BaseModel):
    """`ExecResult` with its output as base64: the bytes need not be text."""

    exit_code: int
    output: Base64Bytes


@dataclass(frozen=True)
class Method:
    """One runtime method that may cross the link: its parameters' types in
    order, its result's type, and whether it needs an instance scope."""

    name: str
    params: Mapping[str, TypeAdapter[Any]]
    result: TypeAdapter[Any]
    invoke: Callable[..., Any]  # (runtime, **args): the one place the method is called
    to_wire: Callable[[Any], Any] = lambda value: value
    from_wire: Callable[[Any], Any] = lambda value: value


def _t(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


_STR, _INT, _BOOL, _NONE = _t(str), _t(int), _t(bool), _t(None)
_LABELS = _t(dict[str, str])
_EXEC = _t(_ExecResultWire)


def _exec_to_wire(result: ExecResult) -> _ExecResultWire:
    # Constructed, not validated: validating would read the raw bytes as base64.
    return _ExecResultWire.model_construct(exit_code=result.exit_code, output=result.output)


def _exec_from_wire(wire: _ExecResultWire) -> ExecResult:
    return ExecResult(exit_code=wire.exit_code, output=wire.output)


def _methods(*methods: Method) -> dict[str, Method]:
    return {method.name: method for method in methods}


METHODS: dict[str, Method] = _methods(
    Method("engine_info", {}, _t(EngineInfo), lambda r: r.engine_info()),
    Method("image_present", {"ref": _STR}, _BOOL, lambda r, ref: r.image_present(ref)),
    Method("image_pullable", {"ref": _STR}, _BOOL, lambda r, ref: r.image_pullable(ref)),
    Method("ensure_image", {"ref": _STR}, _NONE, lambda r, ref: r.ensure_image(ref)),
    Method("image_info", {"ref": _STR}, _t(ImageInfo | None), lambda r, ref: r.image_info(ref)),
    Method("image_size", {"ref": _STR}, _t(int | None), lambda r, ref: r.image_size(ref)),
    Method(
        "held_bottom",
        {"layers": _t(list[str])},
        _t(list[str]),
        lambda r, layers: r.held_bottom(tuple(layers)),
    ),
    Method("remove_image", {"ref": _STR}, _NONE, lambda r, ref: r.remove_image(ref)),
    Method(
        "ensure_volume",
        {"name": _STR, "labels": _LABELS, "size_gb": _t(int | None)},
        _NONE,
        lambda r, name, labels, size_gb: r.ensure_volume(name, labels, size_gb),
    ),
    Method("remove_volume", {"name": _STR}, _NONE, lambda r, name: r.remove_volume(name)),
    Method(
        "list_volumes",
        {"labels": _LABELS},
        _t(list[VolumeState]),
        lambda r, labels: r.list_volumes(labels),
    ),
    Method(
        "volume_used_bytes",
        {"name": _STR},
        _t(int | None),
        lambda r, name: r.volume_used_bytes(name),
    ),
    Method(
        "create_container",
        {"spec": _t(ContainerSpec)},
        _t(ContainerState),
        lambda r, spec: r.create_container(spec),
    ),
    Method(
        "start_container",
        {"container_id": _STR},
        _t(ContainerState),
        lambda r, container_id: r.start_container(container_id),
    ),
    Method(
        "stop_container",
        {"container_id": _STR, "timeout_s": _INT},
        _t(ContainerState | None),
        lambda r, container_id, timeout_s: r.stop_container(container_id, timeout_s),
    ),
    Method(
        "remove_container",
        {"container_id": _STR, "keep_network": _BOOL},
        _NONE,
        lambda r, container_id, keep_network: r.remove_container(
            container_id, keep_network=keep_network
        ),
    ),
    Method(
        "inspect_container",
        {"name_or_id": _STR},
        _t(ContainerState | None),
        lambda r, name_or_id: r.inspect_container(name_or_id),
    ),
    Method(
        "list_containers",
        {"labels": _LABELS},
        _t(list[ContainerState]),
        lambda r, labels: r.list_containers(labels),
    ),
    Method(
        "container_stats",
        {"container_id": _STR},
        _t(ContainerStats | None),
        lambda r, container_id: r.container_stats(container_id),
    ),
    Method(
        "writable_layer_bytes",
        {"container_id": _STR},
        _t(int | None),
        lambda r, container_id: r.writable_layer_bytes(container_id),
    ),
    Method("limits_system_disks", {}, _BOOL, lambda r: r.limits_system_disks()),
    Method(
        "ensure_network",
        {"name": _STR, "labels": _LABELS},
        _NONE,
        lambda r, name, labels: r.ensure_network(name, labels),
    ),
    Method("remove_network", {"name": _STR}, _NONE, lambda r, name: r.remove_network(name)),
    Method(
        "list_networks",
        {"labels": _LABELS},
        _t(list[NetworkState]),
        lambda r, labels: r.list_networks(labels),
    ),
    Method(
        "commit_container",
        {
            "container_id": _STR,
            "repository": _STR,
            "tag": _STR,
            "labels": _t(dict[str, str] | None),
        },
        _STR,
        lambda r, container_id, repository, tag, labels: r.commit_container(
            container_id, repository, tag, labels
        ),
    ),
    Method(
        "exec_in_container",
        {"container_id": _STR, "command": _t(list[str])},
        _EXEC,
        lambda r, container_id, command: r.exec_in_container(container_id, command),
        _exec_to_wire,
        _exec_from_wire,
    ),
    Method(
        "put_file",
        {"container_id": _STR, "path": _STR, "data": _t(Base64Bytes), "mode": _INT},
        _NONE,
        lambda r, container_id, path, data, mode: r.put_file(container_id, path, data, mode),
    ),
    Method(
        "run_once",
        {
            "image": _STR,
            "command": _t(list[str]),
            "files": _t(dict[str, Base64Bytes]),
            "timeout_s": _t(float),
            "cluster_id": _STR,
        },
        _EXEC,
        lambda r, image, command, files, timeout_s, cluster_id: r.run_once(
            image, command, files, timeout_s, cluster_id=cluster_id
        ),
        _exec_to_wire,
        _exec_from_wire,
    ),
    Method(
        "copy_volume",
        {"source": _STR, "target": _STR, "image": _STR, "helper_name": _STR, "labels": _LABELS},
        _INT,
        lambda r, source, target, image, helper_name, labels: r.copy_volume(
            source, target, image=image, helper_name=helper_name, labels=labels
        ),
    ),
)


def encode_request(
    call_id: int, name: str, args: Mapping[str, Any], scope: InstanceScope | None
) -> CallRequest:
    method = METHODS[name]
    dumped = {
        key: method.params[key].dump_python(value, mode="json") for key, value in args.items()
    }
    return CallRequest(id=call_id, method=name, args=dumped, scope=scope)


def decode_result(name: str, response: CallResponse) -> Any:
    """The call's result, or its error raised as the class it was raised as."""
    if response.error is not None:
        raise error_for(response.error)
    method = METHODS[name]
    try:
        return method.from_wire(method.result.validate_python(response.result))
    except ValidationError as exc:
        raise RuntimeFailure(f"the agent answered {name} with something else: {exc}") from exc


def error_for(error: CallError) -> RuntimeFailure:
    return _ERRORS.get(error.code, RuntimeFailure)(error.message)


# -- the agent's side ---------------------------------------------------------
def dispatch(
    runtime: Runtime,
    request: CallRequest,
    admit: Callable[[InstanceScope], None] = lambda _scope: None,
) -> CallResponse:
    """Run one request on `runtime` (blocking: call it from a worker thread).
    `admit` checks the scope first and raises `StaleGeneration` to refuse it."""
    method = METHODS.get(request.method)
    if method is None:
        return _refusal(request.id, RuntimeFailure(f"no runtime method {request.method!r}"))
    try:
        if request.scope is not None:
            admit(request.scope)
        args = {
            key: adapter.validate_python(request.args[key])
            for key, adapter in method.params.items()
        }
        result = method.invoke(runtime, **args)
        return CallResponse(
            id=request.id, result=method.result.dump_python(method.to_wire(result), mode="json")
        )
    except RuntimeFailure as exc:
        return _refusal(request.id, exc)
    except GpudockError as exc:  # not a runtime error, yet a message worth the server's log
        return _refusal(request.id, RuntimeFailure(exc.message))
    except (ValidationError, KeyError, TypeError) as exc:
        return _refusal(request.id, RuntimeFailure(f"a malformed {request.method} call: {exc}"))


def _refusal(call_id: int, exc: RuntimeFailure) -> CallResponse:
    return CallResponse(id=call_id, error=CallError(code=exc.code, message=exc.message))
