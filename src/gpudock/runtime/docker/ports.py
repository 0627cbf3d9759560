"""Reaching a port inside a container from the server: its network namespace.

The proxy behind service URLs needs a TCP connection to a port *inside* an
instance, where services often listen on the loopback only (JupyterLab,
TensorBoard and most dev servers do by default). A socket created while the
creating thread is in the container's network namespace belongs to that
namespace for its whole life, so the server makes it there (`setns(2)` in a
short-lived thread of its own, which then switches back) and connects it to
127.0.0.1:port — the same place the SSH gateway's `-L` relay reaches, with no
process in the container and no copy through the engine. The data path is then
the kernel's loopback inside the container: no bridge, no NAT, no firewall rule,
and nothing another tenant's container could reach.

Needs the engine's processes on this host and CAP_SYS_ADMIN (the server runs as
root for its loop-mounted volumes). Where that is missing (a remote engine, an
unprivileged server) the socket is an ordinary one aimed at the container's
address on its tenant network: services must then listen on 0.0.0.0.

A container's PID is cached; a stale one cannot lead into another container,
because the namespace is opened first and the PID's cgroup checked after.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable

import docker

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import PortSocket
from gpudock.runtime.docker.translate import translated

CLONE_NEWNET = 0x40000000
LOOPBACK = "127.0.0.1"


class StaleProcess(Exception):
    """The cached PID no longer belongs to the container."""


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


OwnerOfPid = Callable[[int], "str | None"]


def socket_in_netns(pid: int, container_id: str, owner_of_pid: OwnerOfPid) -> socket.socket:
    """A TCP socket in the network namespace of process `pid`, which must be in
    `container_id` as `owner_of_pid` tells (`StaleProcess` if not). The calling
    thread never moves."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            failed.append(StaleProcess(str(exc)))
            return
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if owner_of_pid(pid) != container_id:
                    raise StaleProcess(f"process {pid} is not in container {container_id}")
                _setns(target)
                try:
                    made.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                finally:
                    _setns(own)  # should this fail, the thread ends here anyway
            finally:
                os.close(own)
        except BaseException as exc:
            failed.append(exc)
        finally:
            os.close(target)

    worker = threading.Thread(target=make, name="gpudock-netns")
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return made[0]


class ContainerPorts:
    """Sockets into containers' network namespaces (see the module's docstring)."""

    def __init__(self, api: docker.APIClient, *, local: bool, owner_of_pid: OwnerOfPid) -> None:
        """`owner_of_pid`: the container whose cgroup holds a host PID."""
        self._api = api
        self._owner_of_pid = owner_of_pid
        self._netns = local and os.geteuid() == 0
        self._pids: dict[str, int] = {}
        self._guard = threading.Lock()

    def socket_for(self, container_id: str, port: int) -> PortSocket:
        if not self._netns:
            return PortSocket(socket.socket(), (self._address(container_id), port))
        with self._guard:
            pid = self._pids.get(container_id)
        for attempt in range(2):
            if pid is None:
                pid = self._pid(container_id)
            try:
                sock = socket_in_netns(pid, container_id, self._owner_of_pid)
            except StaleProcess:
                if attempt:
                    raise RuntimeFailure(
                        f"container {container_id} changed while connecting; try again"
                    ) from None
                pid = None
                continue
            except OSError as exc:
                raise RuntimeFailure(
                    f"cannot enter the network of container {container_id}: {exc}"
                ) from exc
            with self._guard:
                self._pids[container_id] = pid
            return PortSocket(sock, (LOOPBACK, port))
        raise AssertionError("unreachable")

    def _inspect(self, container_id: str) -> dict[str, object]:
        with translated(f"inspect container {container_id}"):
            attrs: dict[str, object] = self._api.inspect_container(container_id)
        state = attrs.get("State") or {}
        if not isinstance(state, dict) or not state.get("Running"):
            raise RuntimeFailure(f"container {container_id} is not running")
        return attrs

    def _pid(self, container_id: str) -> int:
        state = self._inspect(container_id)["State"]
        assert isinstance(state, dict)
        return int(state["Pid"])

    def _address(self, container_id: str) -> str:
        settings = self._inspect(container_id).get("NetworkSettings") or {}
        networks = settings.get("Networks") if isinstance(settings, dict) else None
        for network in (networks or {}).values():
            if network.get("IPAddress"):
                return str(network["IPAddress"])
        raise RuntimeFailure(f"container {container_id} has no address the server can reach")
