"""Pod exec over WebSocket, as the apiserver and kubelet serve it: the
`v5.channel.k8s.io` protocol (else `v4.channel.k8s.io`), each binary message
one channel byte then data: 0 stdin, 1 stdout, 2 stderr, 3 the final
`Status` (Success, or Failure with the exit code as the cause's message),
4 terminal resize (`{"Width": w, "Height": h}`), and in v5 `255 <channel>`
to close a channel (stdin's end). The process is a Docker exec in the pod's
container on the local engine."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import anyio
import docker
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.kube_fake.statuses import ApiError
from tests.support.kube_fake.store import Store, by_kind

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def _status(exit_code: int) -> bytes:
    if exit_code == 0:
        body: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        body = {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: {exit_code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        }
    return bytes([ERROR]) + json.dumps(body).encode()


def _read_frames(raw: socket.socket, tty: bool) -> list[tuple[int, bytes]]:
    """The next piece of the exec's output: (channel, data); [] at its end."""
    if tty:
        data = raw.recv(65536)
        return [(STDOUT, data)] if data else []
    header = raw.recv(8, socket.MSG_WAITALL)
    if len(header) < 8:
        return []
    stream, size = struct.unpack(">BxxxL", header)
    data = raw.recv(size, socket.MSG_WAITALL) if size else b""
    return [(STDERR if stream == 2 else STDOUT, data)]


def _target(
    websocket: WebSocket, store: Store, engine: docker.APIClient | None, namespace: str, pod: str
) -> tuple[str, str]:
    """(the protocol chosen, the pod's container id); `ApiError` if exec cannot run."""
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    chosen = next((p for p in PROTOCOLS if p in offered), None)
    found = store.get(by_kind("Pod"), namespace, pod)
    if engine is None or chosen is None or not websocket.query_params.getlist("command"):
        raise ApiError.bad_request("exec needs a kubelet, a channel protocol and a command")
    containers = engine.containers(filters={"label": f"kfake.pod={found['metadata']['uid']}"})
    if not containers:
        raise ApiError.bad_request(f"container not found ({pod})")
    return chosen, str(containers[0]["Id"])


async def serve_exec(
    websocket: WebSocket, store: Store, engine: docker.APIClient | None, namespace: str, pod: str
) -> None:
    query = websocket.query_params
    command = query.getlist("command")
    tty = query.get("tty") in ("true", "1")
    try:
        chosen, container_id = _target(websocket, store, engine, namespace, pod)
    except ApiError as exc:
        await websocket.close(code=1011, reason=exc.message[:120])
        return
    assert engine is not None
    await websocket.accept(subprotocol=chosen)
    made = engine.exec_create(container_id, command, stdin=True, tty=tty)
    attached = engine.exec_start(made["Id"], socket=True, tty=tty)
    raw: socket.socket = attached._sock

    async def output() -> None:
        while frames := await anyio.to_thread.run_sync(_read_frames, raw, tty):
            for channel, data in frames:
                await websocket.send_bytes(bytes([channel]) + data)
        code = int(engine.exec_inspect(made["Id"]).get("ExitCode") or 0)
        await websocket.send_bytes(_status(code))
        await websocket.close()

    async def input_() -> None:
        try:
            while True:
                message = await websocket.receive_bytes()
                channel, data = message[0], message[1:]
                if channel == STDIN:
                    await anyio.to_thread.run_sync(raw.sendall, data)
                elif channel == RESIZE:
                    size = json.loads(data)
                    engine.exec_resize(made["Id"], height=size["Height"], width=size["Width"])
                elif channel == CLOSE and data[:1] == bytes([STDIN]):
                    raw.shutdown(socket.SHUT_WR)
        except (WebSocketDisconnect, RuntimeError):
            return

    async with anyio.create_task_group() as group:
        group.start_soon(input_)
        await output()
        group.cancel_scope.cancel()
    raw.close()
