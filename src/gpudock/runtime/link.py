"""The runtime of an agent host: every call goes over that host's link.

`LinkRuntime` implements the `Runtime` contract by sending each call to the
host's agent (`runtime.calls`) through a `CallTransport`, which the agent
gateway attaches when the link comes up and detaches when it drops. Without
one, a call fails at once with `RuntimeUnavailable` naming the host: the
reconciler retries later, as it does when a local engine is down. A call the
link drops mid-way, or that gets no answer within its timeout, fails the same
way; whether the agent ran it is then unknown, which is why every command is
idempotent and carries its instance's generation.

`HostRuntimes` says which runtime acts on which host: an agent host's
`LinkRuntime`, or the server's own engine for every other host (the
single-machine default and simulated fleets).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime import calls
from gpudock.runtime.base import (
    BuildJob,
    BuildLine,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineInfo,
    ExecResult,
    ExecStream,
    ImageInfo,
    NetworkState,
    PortSocket,
    Runtime,
    VolumeState,
)
from gpudock.runtime.calls import CallRequest, CallResponse, ExecRequest, InstanceScope
from gpudock.runtime.image_delta import without_layers
from gpudock.runtime.link_ports import PortRequest
from gpudock.runtime.transfer import ImageMove, ImageStreams, VolumeCopied

LOST_EXIT_CODE = 255  # an exec whose link went before it said how it ended


class CallTransport(Protocol):
    def call(self, request: CallRequest, timeout_s: float) -> CallResponse:
        """Send one request and wait for its answer (blocking; from any thread but
        the link's own loop). `RuntimeUnavailable` if the link is down, drops
        before the answer, or no answer comes within `timeout_s`."""
        ...

    def open_exec(self, request: ExecRequest, timeout_s: float) -> ExecStream:
        """Start an exec on the agent's engine over a channel of its own (see
        `Runtime.open_exec_stream`); its id is `exec_id_on(host, …)`."""
        ...

    def resize_exec(self, exec_id: str, width: int, height: int) -> None: ...

    def open_port(self, request: PortRequest, timeout_s: float) -> PortSocket:
        """A connection to a port inside a container on the agent's host, over a
        channel of its own (`runtime.link_ports`); its socket is already connected."""
        ...

    def exec_exit_code(self, exec_id: str) -> int | None: ...

    def send_volume(
        self,
        target: CallTransport,
        volumes: tuple[str, str],
        scope: InstanceScope | None,
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> VolumeCopied:
        """Stream volume `volumes[0]` of this host into `volumes[1]` on `target`'s
        host (`runtime.transfer`), resuming what an earlier try left there;
        `on_progress(bytes received)` from the calling thread."""
        ...

    def send_image(
        self,
        target: CallTransport,
        move: ImageMove,
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> int:
        """`docker save` of `move.ref` on this host (less `move.omit_layers`) into
        `docker load` on `target`'s; `on_progress(bytes moved)` from the calling thread."""
        ...

    def push_image(
        self,
        move: ImageMove,
        open_chunks: Callable[[], Iterator[bytes]],
        on_progress: Callable[[int], None],
        timeout_s: float,
    ) -> int:
        """An image of the server's own engine (`open_chunks` makes its `docker
        save` stream, once per try) into `docker load` on this host, resumable."""
        ...


EXEC_PREFIX = "link:"


def exec_id_on(host_id: str, agent_exec_id: str) -> str:
    """The id of an exec over `host_id`'s link (what `HostRuntimes.for_exec` reads)."""
    return f"{EXEC_PREFIX}{host_id}:{agent_exec_id}"


@dataclass
class _Slot:
    """The transport of one host, shared by its scoped copies of `LinkRuntime`."""

    host_name: str
    transport: CallTransport | None = None
    ids: Iterator[int] = field(default_factory=itertools.count)


class LinkRuntime:
    def __init__(
        self,
        slot: _Slot,
        *,
        timeout_s: float,
        copy_timeout_s: float,
        scope: InstanceScope | None = None,
    ) -> None:
        self._slot = slot
        self._timeout_s = timeout_s
        self._copy_timeout_s = copy_timeout_s
        self._scope = scope

    @property
    def host_name(self) -> str:
        return self._slot.host_name

    def scoped(self, scope: InstanceScope) -> LinkRuntime:
        """This host's runtime, each call carrying `scope` (checked by the agent)."""
        return LinkRuntime(
            self._slot, timeout_s=self._timeout_s, copy_timeout_s=self._copy_timeout_s, scope=scope
        )

    def _transport(self) -> CallTransport:
        transport = self._slot.transport
        if transport is None:
            raise RuntimeUnavailable(
                f"host {self.host_name}: its agent is not connected to this server; "
                "the call is retried once its link is up (see `gpudock hosts list`)"
            )
        return transport

    def _call(self, method: str, wait_s: float | None = None, /, **args: Any) -> Any:
        """`method` on the host's agent; `wait_s`: how long its answer may take
        (default: the runtime call timeout)."""
        transport = self._transport()
        request = calls.encode_request(next(self._slot.ids), method, args, self._scope)
        response = transport.call(request, wait_s or self._timeout_s)
        return calls.decode_result(method, response)

    def _not_over_the_link(self, what: str) -> RuntimeFailure:
        return RuntimeFailure(
            f"{what} on host {self.host_name} does not go over its agent link yet"
        )

    # -- the engine and images --------------------------------------------------
    def engine_info(self) -> EngineInfo:
        result: EngineInfo = self._call("engine_info")
        return result

    def image_present(self, ref: str) -> bool:
        return bool(self._call("image_present", ref=ref))

    def image_pullable(self, ref: str) -> bool:
        return bool(self._call("image_pullable", ref=ref))

    def ensure_image(self, ref: str) -> None:
        self._call("ensure_image", ref=ref)

    def image_info(self, ref: str) -> ImageInfo | None:
        result: ImageInfo | None = self._call("image_info", ref=ref)
        return result

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        result: list[str] = self._call("held_bottom", layers=list(layers))
        return result

    def image_size(self, ref: str) -> int | None:
        result: int | None = self._call("image_size", ref=ref)
        return result

    def remove_image(self, ref: str) -> None:
        self._call("remove_image", ref=ref)

    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        raise self._not_over_the_link("an image build")

    # -- volumes ------------------------------------------------------------------
    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        self._call("ensure_volume", name=name, labels=labels, size_gb=size_gb)

    def remove_volume(self, name: str) -> None:
        self._call("remove_volume", name=name)

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        result: list[VolumeState] = self._call("list_volumes", labels=labels)
        return result

    def volume_used_bytes(self, name: str) -> int | None:
        result: int | None = self._call("volume_used_bytes", name=name)
        return result

    def copy_volume(
        self,
        source: str,
        target: str,
        *,
        image: str,
        helper_name: str,
        labels: dict[str, str],
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        # Progress does not cross the link yet: the whole copy is one call.
        copied = int(
            self._call(
                "copy_volume",
                self._copy_timeout_s + self._timeout_s,
                source=source,
                target=target,
                image=image,
                helper_name=helper_name,
                labels=labels,
            )
        )
        if on_progress is not None:
            on_progress(copied, copied)
        return copied

    def copy_volume_to(
        self,
        target: LinkRuntime,
        source: str,
        target_volume: str,
        on_progress: Callable[[int], None],
    ) -> VolumeCopied:
        """Volume `source` of this host into `target_volume` (which exists) on
        `target`'s host, over both links; resumable (see `runtime.transfer`)."""
        return self._transport().send_volume(
            target._transport(),
            (source, target_volume),
            self._scope,
            on_progress,
            self._copy_timeout_s,
        )

    def copy_image_to(
        self,
        target: LinkRuntime,
        ref: str,
        omit_layers: list[str] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> int:
        """Image `ref` of this host onto `target`'s host, over both links, without the
        files of `omit_layers` (diff IDs `target` holds: `transfer.common_bottom`);
        the bytes moved."""
        move = ImageMove(ref=ref, scope=self._scope, omit_layers=omit_layers or [])
        return self._transport().send_image(
            target._transport(), move, on_progress or (lambda _: None), self._copy_timeout_s
        )

    def receive_image(
        self,
        source: ImageStreams,
        ref: str,
        omit: tuple[list[str], Path] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> int:
        """Image `ref` of `source` (the server's own engine) onto this host, for
        gpudock's images that no registry has; the bytes that crossed. `omit`:
        the diff IDs this host holds at the image's bottom (`held_bottom`), left
        out of the archive, and a directory to spool the layers read meanwhile."""
        layers, spool_dir = omit or ([], Path())
        move = ImageMove(ref=ref, scope=self._scope, omit_layers=layers)

        def chunks() -> Iterator[bytes]:
            saved = source.save_image(ref)
            return without_layers(saved, set(layers), spool_dir) if layers else saved

        return self._transport().push_image(
            move, chunks, on_progress or (lambda _: None), self._copy_timeout_s
        )

    # -- containers ---------------------------------------------------------------
    def create_container(self, spec: ContainerSpec) -> ContainerState:
        result: ContainerState = self._call("create_container", spec=spec)
        return result

    def start_container(self, container_id: str) -> ContainerState:
        result: ContainerState = self._call("start_container", container_id=container_id)
        return result

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        # The agent's engine waits up to timeout_s for the process: so does the call.
        result: ContainerState | None = self._call(
            "stop_container",
            self._timeout_s + timeout_s,
            container_id=container_id,
            timeout_s=timeout_s,
        )
        return result

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        self._call("remove_container", container_id=container_id, keep_network=keep_network)

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        result: ContainerState | None = self._call("inspect_container", name_or_id=name_or_id)
        return result

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        result: list[ContainerState] = self._call("list_containers", labels=labels)
        return result

    def container_stats(self, container_id: str) -> ContainerStats | None:
        result: ContainerStats | None = self._call("container_stats", container_id=container_id)
        return result

    def container_of_pid(self, pid: int) -> str | None:
        return None  # the host's processes cannot be seen from the server

    def volumes_reach_every_host(self) -> bool:
        return False  # an agent's volumes are on its host's disks

    def limits_system_disks(self) -> bool:
        return bool(self._call("limits_system_disks"))

    def writable_layer_bytes(self, container_id: str) -> int | None:
        result: int | None = self._call("writable_layer_bytes", container_id=container_id)
        return result

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        return str(
            self._call(
                "commit_container",
                container_id=container_id,
                repository=repository,
                tag=tag,
                labels=labels,
            )
        )

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        result: ExecResult = self._call(
            "exec_in_container", container_id=container_id, command=command
        )
        return result

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        self._call("put_file", container_id=container_id, path=path, data=data, mode=mode)

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        result: ExecResult = self._call(
            "run_once",
            self._timeout_s + timeout_s,
            image=image,
            command=command,
            files=files,
            timeout_s=timeout_s,
            cluster_id=cluster_id,
        )
        return result

    # -- networks -----------------------------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        self._call("ensure_network", name=name, labels=labels)

    def remove_network(self, name: str) -> None:
        self._call("remove_network", name=name)

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        result: list[NetworkState] = self._call("list_networks", labels=labels)
        return result

    # -- streams (the SSH gateway, the service proxy) -----------------------------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        request = ExecRequest(
            container_id=container_id, command=command, env=env, tty=tty, scope=self._scope
        )
        return self._transport().open_exec(request, self._timeout_s)

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        transport = self._slot.transport
        if transport is not None:  # else the exec has ended with its link
            transport.resize_exec(exec_id, width, height)

    def exec_exit_code(self, exec_id: str) -> int | None:
        transport = self._slot.transport
        return transport.exec_exit_code(exec_id) if transport is not None else LOST_EXIT_CODE

    def port_socket(self, container_id: str, port: int) -> PortSocket:
        request = PortRequest(container_id=container_id, port=port, scope=self._scope)
        return self._transport().open_port(request, self._timeout_s)


class HostRuntimes:
    """Which runtime acts on a host: an agent host's `LinkRuntime`, else `local`.

    The platform names the agent hosts it knows (`know`) at start; the agent
    gateway names each host whose link comes up and attaches its transport.
    A host known as an agent host never falls back to `local`, linked or not:
    its containers are not on this machine's engine."""

    def __init__(self, local: Runtime, *, timeout_s: float, copy_timeout_s: float) -> None:
        self.local = local
        self._timeout_s = timeout_s
        self._copy_timeout_s = copy_timeout_s
        self._hosts: dict[str, LinkRuntime] = {}
        self._lock = threading.Lock()

    def know(self, host_id: str, host_name: str) -> LinkRuntime:
        with self._lock:
            runtime = self._hosts.get(host_id)
            if runtime is None:
                runtime = LinkRuntime(
                    _Slot(host_name),
                    timeout_s=self._timeout_s,
                    copy_timeout_s=self._copy_timeout_s,
                )
                self._hosts[host_id] = runtime
            return runtime

    def attach(self, host_id: str, host_name: str, transport: CallTransport) -> None:
        """The host's link is up: its calls go through `transport` from now on."""
        self.know(host_id, host_name)._slot.transport = transport

    def detach(self, host_id: str, transport: CallTransport) -> None:
        """That link is down (a newer one the host opened meanwhile stays)."""
        with self._lock:
            runtime = self._hosts.get(host_id)
        if runtime is not None and runtime._slot.transport is transport:
            runtime._slot.transport = None

    def for_host(self, host_id: str | None, scope: InstanceScope | None = None) -> Runtime:
        with self._lock:
            runtime = self._hosts.get(host_id) if host_id is not None else None
        if runtime is None:
            return self.local
        return runtime.scoped(scope) if scope is not None else runtime

    def for_exec(self, exec_id: str) -> Runtime:
        """The runtime that started exec `exec_id` (a link's ids name their host)."""
        if exec_id.startswith(EXEC_PREFIX):
            host_id = exec_id[len(EXEC_PREFIX) :].partition(":")[0]
            with self._lock:
                runtime = self._hosts.get(host_id)
            if runtime is not None:
                return runtime
        return self.local

    def every_engine(self) -> list[Runtime]:
        """The local engine and each agent host's whose link is up: where this
        installation's containers may be (garbage collection, adoption)."""
        with self._lock:
            linked = [r for r in self._hosts.values() if r._slot.transport is not None]
        return [self.local, *linked]

    def linked_engines(self) -> list[tuple[str, Runtime, object]]:
        """(host id, runtime, its link) of each agent host whose link is up; the
        link is a new object at each link-up (fencing checks a host then)."""
        with self._lock:
            hosts = list(self._hosts.items())
        return [
            (host_id, runtime, transport)
            for host_id, runtime in hosts
            if (transport := runtime._slot.transport) is not None
        ]

    def linked(self, host_id: str) -> bool:
        with self._lock:
            runtime = self._hosts.get(host_id)
        return runtime is not None and runtime._slot.transport is not None
