"""In-memory runtime for unit tests only: the same contract, no engine.

End-to-end tests use the real Docker Engine; this exists so API and service
logic can be tested fast and deterministically.
"""

from __future__ import annotations

import hashlib
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gpudock.errors import RuntimeFailure
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
    ImageNotFound,
    NetworkState,
    PortSocket,
    RawOutput,
    RegistryUnreachable,
    VolumeState,
)


@dataclass
class _Container:
    state: ContainerState
    spec: ContainerSpec


@dataclass(frozen=True)
class FakeUsage:
    """What the fake engine reports for one container (its limits come from its spec)."""

    cpu_total_ns: int = 0
    memory_bytes: int = 64 * 2**20
    pids: int = 1
    block_read_bytes: int = 0
    block_write_bytes: int = 0
    net_rx_bytes: int = 0
    net_tx_bytes: int = 0


@dataclass
class FakeRuntime:
    images: set[str] = field(default_factory=lambda: {"gpudock/base:bookworm"})
    image_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    system_disk_quota: bool = False  # the engine's own limit; False: the watchdog's job
    writable_bytes: dict[str, int] = field(default_factory=dict)  # by container id
    pullable: set[str] = field(default_factory=set)
    registry_reachable: bool = True  # False: every pull and look-up fails as offline
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # Reconciler threads and API workers call it at once: every scan iterates a
    # snapshot (list(...)), so an insert elsewhere cannot break it mid-loop.
    containers: dict[str, _Container] = field(default_factory=dict)
    # name -> id, so that a look-up by name is not a scan (a bench holds thousands)
    container_ids: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, VolumeState] = field(default_factory=dict)
    volume_quotas_gb: dict[str, int | None] = field(default_factory=dict)
    networks: dict[str, NetworkState] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    run_results: dict[str, ExecResult] = field(default_factory=dict)
    exec_codes: dict[str, int | None] = field(default_factory=dict)
    resizes: list[tuple[str, int, int]] = field(default_factory=list)  # (exec id, width, height)
    volume_copies: list[tuple[str, str]] = field(default_factory=list)
    volume_sizes: dict[str, int] = field(default_factory=dict)
    # what `container_stats` reports, by container id (see `set_usage`)
    usage: dict[str, FakeUsage] = field(default_factory=dict)
    # host PID -> container id, as the processes' cgroups would say (`add_process`)
    pid_owners: dict[int, str] = field(default_factory=dict)
    # (container id, port inside) -> where a test's server listens (`serve_port`)
    served_ports: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def engine_info(self) -> EngineInfo:
        return EngineInfo(cpus=2, memory_bytes=24 * 2**30, server_version="fake")

    def image_present(self, ref: str) -> bool:
        return self.image_info(ref) is not None

    def image_info(self, ref: str) -> ImageInfo | None:
        """Names compare after the engine's normalisation; an image's id is a
        digest of its name, so aliases and the id itself resolve to one image."""
        by_name = {_familiar(name): name for name in list(self.images)}
        name = by_name.get(_familiar(ref))
        if name is None:
            wanted = ref.removeprefix("sha256:")
            name = next((n for n in list(self.images) if _fake_id(n)[7:].startswith(wanted)), None)
            if name is None or len(wanted) < 12:
                return None
        familiar = _familiar(name)
        return ImageInfo(
            id=_fake_id(name),
            tags=(familiar,),
            labels=self.image_labels.get(familiar, {}),
            size_bytes=1_000_000,
        )

    def image_pullable(self, ref: str) -> bool:
        if not self.registry_reachable:
            raise RegistryUnreachable(
                f"image {ref!r} is not on the engine and its registry cannot be reached "
                "from it (dial tcp: lookup registry: no such host)"
            )
        return _familiar(ref) in {_familiar(p) for p in list(self.pullable)}

    def ensure_image(self, ref: str) -> None:
        if self.image_present(ref):
            return
        if not self.image_pullable(ref):
            raise ImageNotFound(f"image {ref!r} not found")
        self.images.add(ref)

    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        with self._lock:
            if name not in self.volumes:
                self.volumes[name] = VolumeState(name=name, labels=dict(labels))
                self.volume_quotas_gb[name] = size_gb

    def remove_volume(self, name: str) -> None:
        with self._lock:
            self.volumes.pop(name, None)
            self.volume_quotas_gb.pop(name, None)

    # -- tenant networks --------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        with self._lock:
            self.networks.setdefault(name, NetworkState(name=name, labels=dict(labels)))

    def remove_network(self, name: str) -> None:
        with self._lock:
            if not any(c.spec.network == name for c in list(self.containers.values())):
                self.networks.pop(name, None)

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        return [n for n in list(self.networks.values()) if labels.items() <= n.labels.items()]

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        return [v for v in list(self.volumes.values()) if labels.items() <= v.labels.items()]

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
        with self._lock:
            if source not in self.volumes or target not in self.volumes:
                raise RuntimeFailure(f"could not copy volume {source} to {target}: no such volume")
            self.volume_copies.append((source, target))
        size = self.volume_sizes.get(source, 0)
        self.volume_sizes[target] = size
        if on_progress is not None:
            on_progress(size, size)
        return size

    def create_container(self, spec: ContainerSpec) -> ContainerState:
        with self._lock:
            found = self._find(spec.name)
            if found is not None:
                return found.state
            if not self.image_present(spec.image):
                raise ImageNotFound(f"image {spec.image!r} not found")
            if spec.network:
                self.networks.setdefault(
                    spec.network, NetworkState(name=spec.network, labels=dict(spec.network_labels))
                )
            state = ContainerState(
                id=f"fake{next(self._ids):08d}",
                name=spec.name,
                running=False,
                status="created",
                labels=dict(spec.labels),
            )
            self.containers[state.id] = _Container(state=state, spec=spec)
            self.container_ids[state.name] = state.id
            return state

    def start_container(self, container_id: str) -> ContainerState:
        with self._lock:
            container = self._get(container_id)
            if not container.state.running:
                container.state = replace(
                    container.state, running=True, status="running", started_at=self.clock()
                )
            return container.state

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        with self._lock:
            container = self._find(container_id)
            if container is None:
                return None
            if container.state.running:
                container.state = replace(
                    container.state,
                    running=False,
                    status="exited",
                    finished_at=self.clock(),
                    exit_code=0,
                )
            return container.state

    def end_main_process(self, container_id: str, exit_code: int) -> None:
        """What a job's command ending does to its container (`spec.command` is
        what it ran): exited, with that code, now."""
        with self._lock:
            container = self._get(container_id)
            container.state = replace(
                container.state,
                running=False,
                status="exited",
                finished_at=self.clock(),
                exit_code=exit_code,
            )

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        with self._lock:
            container = self._find(container_id)
            if container is not None:
                del self.containers[container.state.id]
                self.container_ids.pop(container.state.name, None)
        if container is not None and container.spec.network and not keep_network:
            self.remove_network(container.spec.network)

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        found = self._find(name_or_id)
        return found.state if found else None

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        return [
            c.state
            for c in list(self.containers.values())
            if labels.items() <= c.state.labels.items()
        ]

    def volumes_reach_every_host(self) -> bool:
        return False

    def limits_system_disks(self) -> bool:
        return self.system_disk_quota

    def writable_layer_bytes(self, container_id: str) -> int | None:
        found = self._find(container_id)
        return None if found is None else self.writable_bytes.get(found.state.id, 0)

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        self._get(container_id)
        self.images.add(f"{repository}:{tag}")
        self.image_labels[_familiar(f"{repository}:{tag}")] = dict(labels or {})
        return f"{repository}:{tag}"

    def remove_image(self, ref: str) -> None:
        self.images.discard(ref)

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        self._get(container_id)
        return ExecResult(exit_code=0, output=b"")

    # -- images ----------------------------------------------------
    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        """Walk the plan's steps; a COPY needs its sources in the context and
        `RUN false` fails, as the engine would say it."""
        for stage in job.plan.stages:
            for step in stage.steps:
                yield BuildLine(text=f"Step {step.number}/{job.plan.total_steps} : {step.text}")
                if step.run is not None and step.run.argv[-1].strip() == "false":
                    shown = " ".join(step.run.argv)
                    yield BuildLine(error=f"The command '{shown}' returned a non-zero code: 1")
                    return
                if step.copy is not None and step.copy.from_image is None:
                    missing = [s for s in step.copy.sources if not job.context.matches(s)]
                    if missing and step.copy.from_stage is None:
                        yield BuildLine(
                            error=f"COPY/ADD source {missing[0]!r} is not in the context"
                        )
                        return
        self.images.add(job.tag)
        self.image_labels[_familiar(job.tag)] = dict(job.labels)
        yield BuildLine(image_id=_fake_id(job.tag))

    def image_size(self, ref: str) -> int | None:
        return 1_000_000 if self.image_present(ref) else None

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        return []  # the fake's images have no layers

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        self.files[(self._get(container_id).state.id, path)] = data

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        if not self.image_present(image):
            raise ImageNotFound(f"image {image!r} not found")
        passing = b'[{"check": "fake runtime", "ok": true, "detail": ""}]\n'
        return self.run_results.get(image, ExecResult(exit_code=0, output=passing))

    # -- exec streams: every attached exec behaves like `cat` -------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        if not self._get(container_id).state.running:
            raise RuntimeFailure(f"container {container_id} is not running")
        ours, theirs = socket.socketpair()
        exec_id = f"fakeexec{next(self._ids):08d}"
        self.exec_codes[exec_id] = None
        threading.Thread(target=self._echo, args=(exec_id, theirs), daemon=True).start()
        ours.setblocking(False)
        return ExecStream(exec_id=exec_id, sock=ours, initial=b"", decoder=RawOutput(), tty=tty)

    def _echo(self, exec_id: str, sock: socket.socket) -> None:
        with sock:
            while data := sock.recv(1 << 16):
                sock.sendall(data)
            self.exec_codes[exec_id] = 0

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        self.resizes.append((exec_id, width, height))

    def exec_exit_code(self, exec_id: str) -> int | None:
        return self.exec_codes.get(exec_id)

    # -- service URLs: ports lead to servers the test runs -----------
    def serve_port(self, name_or_id: str, port: int, address: tuple[str, int]) -> None:
        """Make `port` inside the container lead to `address` on this machine."""
        self.served_ports[(self._get(name_or_id).state.id, port)] = address

    def port_socket(self, container_id: str, port: int) -> PortSocket:
        container = self._get(container_id)
        if not container.state.running:
            raise RuntimeFailure(f"container {container_id} is not running")
        # A port nobody serves: a closed port on the loopback, as inside a container.
        address = self.served_ports.get((container.state.id, port), ("127.0.0.1", 1))
        return PortSocket(sock=socket.socket(socket.AF_INET, socket.SOCK_STREAM), address=address)

    def spec_of(self, name_or_id: str) -> ContainerSpec:
        return self._get(name_or_id).spec

    def _find(self, name_or_id: str) -> _Container | None:
        found = self.containers.get(name_or_id)
        if found is None:
            found = self.containers.get(self.container_ids.get(name_or_id, ""))
        return found

    def _get(self, name_or_id: str) -> _Container:
        found = self._find(name_or_id)
        if found is None:
            raise RuntimeFailure(f"no such container {name_or_id}")
        return found

    # -- usage: readings the test sets, taken at `clock()` ----------
    def set_usage(self, name_or_id: str, usage: FakeUsage) -> None:
        self.usage[self._get(name_or_id).state.id] = usage

    def add_process(self, name_or_id: str, pid: int) -> None:
        """A process of the container, for `container_of_pid`."""
        self.pid_owners[pid] = self._get(name_or_id).state.id

    def container_of_pid(self, pid: int) -> str | None:
        return self.pid_owners.get(pid)

    def container_stats(self, container_id: str) -> ContainerStats | None:
        container = self._find(container_id)
        if container is None or not container.state.running:
            return None
        usage = self.usage.get(container.state.id, FakeUsage())
        return ContainerStats(
            cpu_total_ns=usage.cpu_total_ns,
            # as Docker holds it: no more CPUs than the engine has
            cpu_limit=min(container.spec.cpus, float(self.engine_info().cpus)),
            memory_bytes=usage.memory_bytes,
            memory_limit_bytes=container.spec.memory_mb * 2**20,
            pids=usage.pids,
            read_at=self.clock(),
            block_read_bytes=usage.block_read_bytes,
            block_write_bytes=usage.block_write_bytes,
            net_rx_bytes=usage.net_rx_bytes,
            net_tx_bytes=usage.net_tx_bytes,
        )

    def volume_used_bytes(self, name: str) -> int | None:
        """`volume_sizes` (what a test wrote there), for a volume that exists."""
        return self.volume_sizes.get(name, 0) if name in self.volumes else None


def _familiar(ref: str) -> str:
    """The engine's normalisation, as far as the fake needs it."""
    name = ref.removeprefix("docker.io/")
    if name.startswith("library/") and name.count("/") == 1:
        name = name.removeprefix("library/")
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last or "@" in last else f"{name}:latest"


def _fake_id(name: str) -> str:
    return "sha256:" + hashlib.sha256(_familiar(name).encode()).hexdigest()
