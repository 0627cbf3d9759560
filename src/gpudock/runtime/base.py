"""The runtime seam. Contracts, for every implementation:

- Every method is idempotent and returns quickly (bounded by the runtime's
  call timeout); none waits for a condition that may never come.
- Vendor exceptions never leave `gpudock.runtime`: they become
  `RuntimeFailure` (the engine answered with an error), `RuntimeUnavailable`
  (the engine cannot be reached) or a more specific subclass below.
- Removing something that does not exist returns silently.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from gpudock.errors import RuntimeFailure

if TYPE_CHECKING:
    from gpudock.runtime.build.context import BuildContext
    from gpudock.runtime.build.plan import Plan

LABEL_MANAGED = "gpudock.managed"
LABEL_CLUSTER = "gpudock.cluster"
LABEL_INSTANCE = "gpudock.instance"
LABEL_HOST = "gpudock.host"
LABEL_GPUS = "gpudock.gpus"
LABEL_OWNER = "gpudock.user"
LABEL_BUILD = "gpudock.build"  # a build step's container (see runtime.build)
LABEL_CHECK = "gpudock.check"  # a `run_once` container; the value: its time limit in seconds
LABEL_COMMIT_OF = "gpudock.commit-of"  # a committed writable layer: `<container id>@<its stop>`

# The sandbox every runtime gives an instance. Capabilities: enough to install
# packages and run services as other users inside the instance; everything that
# reaches the host or the network stack (NET_RAW, MKNOD, SYS_ADMIN, SYS_CHROOT,
# SETFCAP, AUDIT_WRITE, ...) stays dropped.
ALLOWED_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
)
MAX_SHM_MB = 16 * 1024


class ImageNotFound(RuntimeFailure):
    code = "image_not_found"


class RegistryUnreachable(RuntimeFailure):
    """The engine could not reach the registry that would have the image: the name
    may well be right, the network (or the registry) is the problem."""

    code = "registry_unreachable"


class RuntimeTimeout(RuntimeFailure):
    """The engine answered, but the work it runs (a check, a data copy) did not
    end within its time limit; the message names what ran and for how long."""

    code = "runtime_timeout"


class StaleGeneration(RuntimeFailure):
    """An agent refused a command for an instance whose placement has moved on:
    it has seen a newer placement generation of that instance (`runtime.calls`)."""

    code = "stale_generation"


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to create one instance's container."""

    name: str
    hostname: str
    image: str
    labels: dict[str, str]
    env: dict[str, str]
    gpu_uuids: tuple[str, ...]
    real_gpus: bool
    cpus: float
    memory_mb: int
    pids_limit: int
    volume_name: str
    volume_mount: str = "/root/data"
    stop_timeout_s: int = 5
    system_disk_gb: int | None = None  # the writable layer's size, where the engine limits it
    # The tenant's own bridge network (created on demand with `network_labels`);
    # empty: the engine's default network (tests and tools only).
    network: str = ""
    network_labels: dict[str, str] = field(default_factory=dict)
    # A job's shell command line: the container's main process, `/bin/sh -c` it
    # (the arguments of the image's entry point, if it has one); None: keep-alive.
    command: str | None = None
    # A share of one GPU (`gpu_uuids` holds that one): its milli-GPU and its part
    # of the card's memory, for runtimes that ask a device plugin for it (HAMi).
    share_milli: int | None = None
    share_memory_mb: int = 0


def shm_size_mb(spec: ContainerSpec) -> int:
    """The memory-backed /dev/shm an instance gets: half its memory, at most 16 GiB."""
    return min(spec.memory_mb // 2, MAX_SHM_MB)


@dataclass(frozen=True)
class ContainerState:
    id: str
    name: str
    running: bool
    status: str
    labels: dict[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    created_at: datetime | None = None
    # The platform ended it, not its own process (a Kubernetes eviction, a node
    # shut down): why, in the platform's words. The instance moves instead of
    # restarting where it was.
    fault: str | None = None


@dataclass(frozen=True)
class VolumeState:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkState:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: bytes


@dataclass(frozen=True)
class BuildLine:
    """One event of an image build: a log line, or the final error or image id."""

    text: str | None = None
    error: str | None = None
    image_id: str | None = None


@dataclass(frozen=True)
class ImageInfo:
    """An image on the engine: its id, the names it has and its labels."""

    id: str  # sha256:<64 hex>
    tags: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    size_bytes: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # the engine's image Config
    layers: tuple[str, ...] = ()  # its layers' diff IDs, bottom first


@dataclass(frozen=True)
class BuildLimits:
    """What one build may use: an instance sandbox's limits, and a deadline."""

    cpus: float
    memory_mb: int
    pids: int
    timeout_s: float


@dataclass
class BuildJob:
    """One build of a plan whose images are all ids (authorised by the service)."""

    plan: Plan
    context: BuildContext
    tag: str  # repository:tag of the result
    labels: dict[str, str]  # added to the result
    owner: str  # user id: labels, and the scope of the layer cache
    cluster_id: str
    limits: BuildLimits
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclass(frozen=True)
class EngineInfo:
    cpus: int
    memory_bytes: int
    server_version: str


@dataclass(frozen=True)
class ContainerStats:
    """One reading of a running container's resource use."""

    cpu_total_ns: int  # CPU time used since the container started, all cores together
    cpu_limit: float | None  # CPUs it may use; None: no limit
    memory_bytes: int  # in use, page cache excluded (what `docker stats` shows)
    memory_limit_bytes: int | None  # None: no limit
    pids: int
    read_at: datetime  # when the engine took the reading (UTC)
    # counters since the container started (0 where the engine does not say)
    block_read_bytes: int = 0
    block_write_bytes: int = 0
    net_rx_bytes: int = 0
    net_tx_bytes: int = 0


class Runtime(Protocol):
    def engine_info(self) -> EngineInfo:
        """Describe the engine; raises `RuntimeUnavailable` if it cannot be reached."""
        ...

    def image_present(self, ref: str) -> bool:
        """True if the image is on the engine now (no pull)."""
        ...

    def image_pullable(self, ref: str) -> bool:
        """True if a registry says the reference exists (asks the registry, no download);
        `RegistryUnreachable` if the registry cannot be asked."""
        ...

    def ensure_image(self, ref: str) -> None:
        """Make the image present, pulling it if needed; `ImageNotFound` if the
        registry has no such image, `RegistryUnreachable` if it cannot be reached."""
        ...

    def image_info(self, ref: str) -> ImageInfo | None:
        """The image `ref` names on the engine (a name, digest or id, resolved the
        way the engine resolves it for a container), or None if it has none."""
        ...

    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        """Create the named volume unless it exists, limited to `size_gb` where the
        runtime enforces quotas (None: no limit). An existing volume keeps its
        size; one whose backing storage is not mounted (after a reboot) is mounted."""
        ...

    def remove_volume(self, name: str) -> None:
        """Remove the volume; silent if it does not exist."""
        ...

    def create_container(self, spec: ContainerSpec) -> ContainerState:
        """Create (not start) the container. If one with `spec.name` exists, return it."""
        ...

    def start_container(self, container_id: str) -> ContainerState:
        """Start it (no-op if running) and return its state, with the engine's start time."""
        ...

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        """Stop it (SIGTERM, then SIGKILL after timeout_s); None if it does not exist."""
        ...

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        """Remove it, stopping it first if needed; silent if it does not exist.
        Its tenant network goes too once no other container is on it, unless
        `keep_network` (a replacement is about to join it: a move)."""
        ...

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        """Its state, or None if it does not exist."""
        ...

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        """All containers (running or not) carrying every given label."""
        ...

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        """All volumes carrying every given label."""
        ...

    # -- tenant networks --------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        """Create the named bridge network unless it exists (outbound traffic
        allowed, other networks unreachable). `create_container` calls it for
        `spec.network`, so callers rarely need to."""
        ...

    def remove_network(self, name: str) -> None:
        """Remove the network unless a container (running or not) is on it;
        silent if it does not exist or is in use."""
        ...

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        """All networks carrying every given label."""
        ...

    def volumes_reach_every_host(self) -> bool:
        """True if a data volume attaches on any of the backend's hosts (network
        storage): a move then takes the same volume along instead of copying it."""
        ...

    def limits_system_disks(self) -> bool:
        """True if the engine itself caps a container's writable layer at
        `ContainerSpec.system_disk_gb` (writes past it fail with ENOSPC)."""
        ...

    def writable_layer_bytes(self, container_id: str) -> int | None:
        """What the container wrote outside its volumes (its system disk's use);
        None if it does not exist. Costs a walk of the layer: call it rarely."""
        ...

    def volume_used_bytes(self, name: str) -> int | None:
        """What the data volume's file system holds now (as `df` inside the
        container says), or None: no such volume, or a volume without a file
        system of its own (its use cannot be told from the host's). Fast."""
        ...

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        """Commit the container's writable layer as `repository:tag`, adding
        `labels` to the image; return the reference."""
        ...

    def remove_image(self, ref: str) -> None:
        """Remove the image; silent if it does not exist."""
        ...

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        """Run a command to completion inside a running container."""
        ...

    # -- images ----------------------------------------------------
    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        """Run the plan without network access, each step sandboxed like an
        instance, yielding the log as it comes; the last event carries
        `image_id` or `error`. Never pulls, never resolves a name itself."""
        ...

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        """The diff IDs at the bottom of `layers` that an image on this engine has
        in the same order (`transfer.common_bottom` against the one that shares
        most): the layers a `docker load` here takes from its own store."""
        ...

    def image_size(self, ref: str) -> int | None:
        """The image's size in bytes, or None if the engine lacks it."""
        ...

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        """Write one file into a (created or running) container."""
        ...

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        """Run `command` in a throwaway container of `image` (no network, no GPUs)
        with `files` written first (mode 0755); return its exit code and output.
        `RuntimeTimeout` if it runs past `timeout_s` (the container is removed
        either way). The container carries `cluster_id`'s labels and `LABEL_CHECK`
        while it runs, so garbage collection finds one a crash left."""
        ...

    # -- exec streams (the SSH gateway) -------------------------------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        """Start `command` in the running container with stdin, stdout and stderr
        attached (one stream through a pseudo-terminal when `tty`); see `ExecStream`.
        Returns once the process runs; `RuntimeFailure` if the container is not running."""
        ...

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        """Set the terminal size of a `tty` exec; silent if it has ended."""
        ...

    def exec_exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code once its process has ended; None while it runs."""
        ...

    # -- service URLs (the HTTP proxy) ----------------------------------
    def port_socket(self, container_id: str, port: int) -> PortSocket:
        """A new socket from which `port` inside the running container is
        reachable, and the address to connect it to (None: connected already,
        see `PortSocket`). The caller owns the socket. Blocks (an engine call at
        most); `RuntimeFailure` if the container is not running."""
        ...

    # -- data moves (migration) -----------------------------------------
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
        """Copy every file of volume `source` into the existing volume `target`
        (owners, modes and times kept; `target` ends up a mirror of `source`),
        in a throwaway container `helper_name` of `image` with no network.
        Resumable: after an interruption, calling it again with the same names
        removes any leftover helper and finishes the job (rsync when the image
        has it, else a fresh `cp -a`). `on_progress(done, total)` is called now
        and then with byte counts. Returns the bytes in `source`. The copy has a
        time limit of its own (not the call timeout: data takes as long as it
        takes); past it, `RuntimeTimeout` names the helper and how long it ran."""
        ...

    # -- usage (the instance page) ------------------------------------
    def container_stats(self, container_id: str) -> ContainerStats | None:
        """One reading of the container's CPU, memory and process use, taken now
        (no waiting for a second sample: callers compare readings themselves);
        None if it does not exist or is not running."""
        ...

    def container_of_pid(self, pid: int) -> str | None:
        """The id of the container whose cgroup holds the host process `pid`
        (as NVML reports it), or None: in no container, gone, or this engine's
        processes cannot be seen from here (a remote engine). Fast: no engine call."""
        ...


@dataclass
class PortSocket:
    """See `Runtime.port_socket`: `sock` is blocking; connect it to `address`,
    unless that is None: then it is connected already (a relay over an agent's
    link, one end of a socket pair)."""

    sock: socket.socket
    address: tuple[str, int] | None


# -- exec streams (the SSH gateway) -----------------------------------
STDOUT = 1
STDERR = 2


class OutputDecoder(Protocol):
    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Split bytes read from an exec stream into `(STDOUT | STDERR, payload)`
        pieces, keeping any incomplete framing for the next call."""
        ...


class RawOutput:
    """A terminal stream: unframed, all of it the terminal's output."""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        return [(STDOUT, data)] if data else []


class StreamSink(Protocol):
    """Who takes a process's output from a runtime's in-process path (`DirectExec`)."""

    def output(self, stream: int, data: bytes) -> None:
        """Process output: `stream` is STDOUT or STDERR."""

    def output_ended(self) -> None:
        """The process closed its output (it has ended, or is about to)."""

    def pause_input(self) -> None:
        """The process's side cannot take more input for now."""

    def resume_input(self) -> None:
        """It can again."""


class StreamPeer(Protocol):
    """The process's side of an attached `DirectExec`: its stdin and flow control."""

    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None:
        """Close the process's stdin."""

    def pause_reading(self) -> None:
        """Hold the process's output: the sink cannot take more for now."""

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        """Detach (the process keeps running until it ends, as on closing `sock`)."""


class DirectExec(Protocol):
    """An exec stream's bytes without its socket pair, where a runtime relays
    them in this process anyway (an agent's link): a relay on the event loop
    that opened the stream hands them to the caller's callbacks, two syscalls
    and a wake-up per chunk fewer."""

    def attach(self, sink: StreamSink) -> StreamPeer | None:
        """Take over from the stream's sockets, on the loop the stream was opened
        on: output already sent to them goes to `sink` first, and both sockets
        are closed. None when it cannot (another loop, output still queued for
        the socket): then use the sockets as ever."""
        ...


@dataclass
class ExecStream:
    """A process running in a container, attached over a plain socket.

    - `sock` is connected and non-blocking, and the caller owns it: what it
      writes is the process's stdin, `shutdown(SHUT_WR)` closes that stdin, and
      closing the socket detaches (the process keeps running until it ends).
    - `initial` is output the runtime already read from `sock`: decode it first.
    - Everything read goes through `decoder`, which knows the runtime's framing.
    - `err_sock`, when set, carries the process's stderr on its own (unframed,
      read-only, non-blocking, owned by the caller too); `sock` then carries
      stdout only. Output has ended once both have reached end of file.
    - `direct`, when set, offers the same process without the sockets
      (`DirectExec.attach`); a caller that does not ask just uses the sockets.
    """

    exec_id: str
    sock: socket.socket
    initial: bytes
    decoder: OutputDecoder
    tty: bool
    err_sock: socket.socket | None = None
    direct: DirectExec | None = None
