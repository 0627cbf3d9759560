"""Pod port-forward over WebSocket (`v4.channel.k8s.io`, or `portforward.k8s.io`),
as the kubelet serves it: for the i-th port of `?ports=`, channel 2i carries
data and 2i+1 errors, each opened by a frame with the port number (2 bytes,
little-endian). The connection is made inside the pod's network namespace
(its loopback included), as a kubelet's is: a thread enters the container's
namespace (setns) just to connect."""

from __future__ import annotations

import ctypes
import os
import socket
import threading

import anyio
import docker
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.kube_fake.store import Store, by_kind

PROTOCOLS = ("v4.channel.k8s.io", "portforward.k8s.io")
CLONE_NEWNET = 0x40000000


def connect_in_netns(pid: int, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:`port` inside the network namespace of `pid`."""
    made: list[socket.socket | BaseException] = []

    def enter_and_connect() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            finally:
                os.close(fd)
            made.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        except OSError as exc:
            made.append(exc)

    thread = threading.Thread(target=enter_and_connect)  # its namespace dies with it
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


async def serve_portforward(
    websocket: WebSocket, store: Store, engine: docker.APIClient | None, namespace: str, pod: str
) -> None:
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    chosen = next((p for p in PROTOCOLS if p in offered), None)
    ports = [int(p) for p in websocket.query_params.getlist("ports")]
    found = store.find(by_kind("Pod"), namespace, pod)
    containers = (
        engine.containers(filters={"label": f"kfake.pod={found['metadata']['uid']}"})
        if found and engine is not None
        else []
    )
    if chosen is None or len(ports) != 1 or not containers or engine is None:
        await websocket.close(code=1011, reason="port-forward needs one port of a running pod")
        return
    await websocket.accept(subprotocol=chosen)
    port = ports[0]
    for channel in (0, 1):
        await websocket.send_bytes(bytes([channel]) + port.to_bytes(2, "little"))
    pid = int(engine.inspect_container(containers[0]["Id"])["State"]["Pid"])
    try:
        upstream = await anyio.to_thread.run_sync(connect_in_netns, pid, port)
    except OSError as exc:
        await websocket.send_bytes(bytes([1]) + f"connect to port {port}: {exc}".encode())
        await websocket.close()
        return
    upstream.settimeout(None)

    async def from_pod() -> None:
        while data := await anyio.to_thread.run_sync(upstream.recv, 65536):
            await websocket.send_bytes(bytes([0]) + data)
        await websocket.close()

    async def to_pod() -> None:
        try:
            while True:
                message = await websocket.receive_bytes()
                if message[:1] == b"\x00" and len(message) > 1:
                    await anyio.to_thread.run_sync(upstream.sendall, message[1:])
        except (WebSocketDisconnect, RuntimeError):
            upstream.shutdown(socket.SHUT_WR)

    async with anyio.create_task_group() as group:
        group.start_soon(to_pod)
        await from_pod()
        group.cancel_scope.cancel()
    upstream.close()
