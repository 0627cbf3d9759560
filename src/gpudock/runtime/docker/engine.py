"""`DockerRuntime`: the `Runtime` seam over one Docker Engine (a local socket
or a remote engine), composed of one collaborator per kind of object.

Each collaborator talks to the engine through the same low-level docker-py
`APIClient` and translates its errors (`translate.translated`); this class
only composes them where one call touches several kinds (a container joins
a tenant network and mounts a volume).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import docker
from docker.context import ContextAPI

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import (
    ALLOWED_CAPABILITIES,
    LABEL_MANAGED,
    BuildJob,
    BuildLimits,
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
    VolumeState,
)
from gpudock.runtime.build import plan as build_plan
from gpudock.runtime.build.context import BuildContext
from gpudock.runtime.docker import checks
from gpudock.runtime.docker.build import DockerBuilder
from gpudock.runtime.docker.containers import DockerContainers, container_of_pid
from gpudock.runtime.docker.exec import ExecStreams, engine_is_local
from gpudock.runtime.docker.images import DockerImages
from gpudock.runtime.docker.networks import DockerNetworks, HostFirewall, is_tenant_network
from gpudock.runtime.docker.ports import ContainerPorts
from gpudock.runtime.docker.translate import translated
from gpudock.runtime.docker.volumes import DockerVolumes, LoopVolumes

DEFAULT_COPY_TIMEOUT_S = 24 * 3600.0
log = logging.getLogger(__name__)


class _EngineClient(docker.APIClient):  # type: ignore[misc]
    """docker-py's client with the engine's own settings only: requests would
    otherwise put REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) before the engine's TLS
    CA (DOCKER_CERT_PATH) and refuse a TLS engine's certificate, from the very
    first call (the API version), and send the engine's API through a proxy."""

    @property
    def trust_env(self) -> bool:
        return False

    @trust_env.setter
    def trust_env(self, value: bool) -> None:
        """`requests.Session` sets it; the environment is not trusted here."""


def connect(base_url: str | None, timeout_s: float, pool_size: int) -> docker.APIClient:
    """docker-py's low-level client; `RuntimeUnavailable` if the engine does not answer.
    Without `base_url`, the engine is found as the `docker` command would find it
    (DOCKER_HOST, the TLS variables, the current context), as `docker.from_env` does."""
    with translated("connect to the Docker Engine"):
        if base_url:
            return _EngineClient(base_url=base_url, timeout=int(timeout_s), max_pool_size=pool_size)
        found = docker.utils.kwargs_from_env()
        if "base_url" not in found:
            for key, value in ContextAPI.kwargs_from_context().items():
                found.setdefault(key, value)
        return _EngineClient(timeout=int(timeout_s), max_pool_size=pool_size, **found)


class DockerRuntime:
    """Implements `gpudock.runtime.base.Runtime` over one Docker Engine, and
    what `gpudock.images.base_image` needs to import the base image
    (`import_rootfs`, `remove_image_if_unused`)."""

    def __init__(
        self,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        pool_size: int = 16,
        volume_root: Path | None = None,
        host_firewall: bool = True,
        copy_timeout_s: float = DEFAULT_COPY_TIMEOUT_S,
        volume_pool_size: int = 0,
        volume_pool_sizes: tuple[int, ...] = (),
    ) -> None:
        """`timeout_s`: each engine call's. `volume_root`: where size-limited data
        volumes live on the Docker host (see `runtime.docker.volumes`); None:
        volumes without a size limit. `host_firewall`: keep tenant networks from
        connecting to this host (a local engine only; see `runtime.docker.networks`).
        `copy_timeout_s`: a volume copy's time limit (see `copy_volume`).
        `volume_pool_size`: formatted size-limited volume images kept ready per
        size in use, `volume_pool_sizes` from the start (see
        `runtime.docker.volume_pool`; 0: none)."""
        self._api = connect(base_url, timeout_s, pool_size)
        self._engine_cpus: int | None = None
        self._images = DockerImages(self._api)
        self._containers = DockerContainers(self._api)
        self._networks = DockerNetworks(self._api)
        loop = LoopVolumes(volume_root, timeout_s) if volume_root else None
        if loop is not None:
            loop.open_pool(volume_pool_size, volume_pool_sizes)
        self._volumes = DockerVolumes(self._api, loop, copy_timeout_s)
        # Mounts run beside the engine's container create (see create_container),
        # but for images whose create needed the mount already.
        self._mounts = concurrent.futures.ThreadPoolExecutor(pool_size, "gpudock-mount")
        self._mount_first: set[str] = set()
        local = engine_is_local(base_url)
        self._local = local
        self._exec_streams = ExecStreams(self._api, local=local)
        self._ports = ContainerPorts(self._api, local=local, owner_of_pid=container_of_pid)
        firewall = HostFirewall() if host_firewall and local else None
        if firewall is not None and firewall.install():
            firewall.cover_bridges(self._networks.tenant_bridges())

    def close(self) -> None:
        self._volumes.close()
        self._mounts.shutdown(wait=True)
        self._api.close()

    # -- engine and images -------------------------------------------------
    def engine_info(self) -> EngineInfo:
        with translated("read the engine's info"):
            info = self._api.info()
        return EngineInfo(
            cpus=int(info.get("NCPU", 1)),
            memory_bytes=int(info.get("MemTotal", 0)),
            server_version=str(info.get("ServerVersion", "")),
        )

    def image_present(self, ref: str) -> bool:
        return self._images.present(ref)

    def image_pullable(self, ref: str) -> bool:
        return self._images.pullable(ref)

    def ensure_image(self, ref: str) -> None:
        self._images.ensure(ref)

    def image_info(self, ref: str) -> ImageInfo | None:
        return self._images.info(ref)

    def image_size(self, ref: str) -> int | None:
        return self._images.size(ref)

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        return self._images.held_bottom(layers)

    def remove_image(self, ref: str) -> None:
        self._images.remove(ref)

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        return self._containers.commit(container_id, repository, tag, labels)

    def save_image(self, ref: str) -> Iterator[bytes]:
        """`docker save` of `ref` as it is read (an agent sends it to another host)."""
        return self._images.save(ref)

    def load_image(self, chunks: Iterator[bytes]) -> None:
        """`docker load` of a `save_image` stream."""
        self._images.load(chunks)

    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        return DockerBuilder(self._api, self._cpus(), ALLOWED_CAPABILITIES).run(job)

    def build_local_image(
        self, dockerfile: str, context_tar: Path, tag: str, labels: dict[str, str]
    ) -> str:
        """Build one of gpudock's own Dockerfiles (`gpudock.images.service_image`)
        the way user builds run — no network, each step sandboxed — with the
        images it names taken from this engine as they are; the image id."""

        def resolve(text: str, line: int) -> build_plan.BaseImage:
            info = self._images.info(text)
            if info is None:
                raise RuntimeFailure(f"line {line}: the engine has no image {text!r}")
            return build_plan.BaseImage(image_id=info.id, config=info.config)

        try:
            plan = build_plan.plan(dockerfile, resolve)
        except build_plan.DockerfileError as exc:
            raise RuntimeFailure(f"gpudock's own Dockerfile for {tag} is wrong: {exc}") from exc
        limits = BuildLimits(cpus=float(self._cpus()), memory_mb=4096, pids=4096, timeout_s=3600)
        context = BuildContext(context_tar)
        job = BuildJob(plan, context, tag, labels, "gpudock", "", limits)
        image_id = None
        try:
            for line in self.build_image(job):
                if line.error is not None:
                    raise RuntimeFailure(f"building {tag} failed: {line.error}")
                if line.text is not None:
                    log.info("%s: %s", tag, line.text.rstrip())
                image_id = line.image_id or image_id
        finally:
            context.close()
        if image_id is None:
            raise RuntimeFailure(f"building {tag} ended without an image")
        return image_id

    # -- the base image (gpudock.images.base_image) --------------------------
    def import_rootfs(self, tar_chunks: Iterable[bytes], tag: str, changes: list[str]) -> str:
        """Import a root file system's tar, read as it streams, as image `tag`."""
        return self._images.import_rootfs(tar_chunks, tag, changes)

    def remove_image_if_unused(self, ref: str) -> None:
        """Remove the image; `RuntimeFailure` if a container still uses it."""
        self._images.remove_if_unused(ref)

    # -- volumes -----------------------------------------------------------
    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        self._volumes.ensure(name, labels, size_gb)

    def remove_volume(self, name: str) -> None:
        self._volumes.remove(name)

    def wait_for_volume_pool(self, timeout_s: float) -> bool:
        """True once every size in use has its formatted images ready (see
        `runtime.docker.volume_pool`); False without a pool, when formatting
        fails, or past `timeout_s`."""
        return self._volumes.wait_for_pool(timeout_s)

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        return self._volumes.with_labels(labels)

    def volume_directory(self, name: str) -> Path:
        """Where the volume's contents lie on the engine's host (an agent reads
        and writes them there to move them to another host)."""
        return self._volumes.directory(name)

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
        return self._volumes.copy(
            source,
            target,
            image=image,
            helper_name=helper_name,
            labels=labels,
            on_progress=on_progress,
        )

    # -- containers --------------------------------------------------------
    def create_container(self, spec: ContainerSpec) -> ContainerState:
        """The data volume's file system is mounted while the engine creates the
        container: the engine needs it at start, and at create only to copy an
        image's files at the mount point into a new volume. A create that
        failed is tried once more after the mount (that copy may have been
        what failed) with its network looked up afresh (it may have been
        removed under this process: another server on the same engine). An
        image whose create succeeded only then is mounted for first from then on."""
        if spec.image in self._mount_first:
            self._volumes.ensure_mounted(spec.volume_name)
            return self._create(spec)
        mounting = self._mounts.submit(self._volumes.ensure_mounted, spec.volume_name)
        try:
            state = self._create(spec)
        except (ImageNotFound, RuntimeUnavailable):
            concurrent.futures.wait([mounting])
            raise
        except RuntimeFailure:
            mounting.result()
            self._networks.forget(spec.network)
            state = self._create(spec)
            self._mount_first.add(spec.image)
            return state
        mounting.result()
        return state

    def _create(self, spec: ContainerSpec) -> ContainerState:
        cpus = self._cpus()
        with self._networks.joining(spec.network, spec.network_labels):
            try:
                return self._containers.create(spec, cpus)
            except ImageNotFound:
                self._images.forget(spec.image)
                raise

    def start_container(self, container_id: str) -> ContainerState:
        return self._containers.start(container_id)

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        return self._containers.stop(container_id, timeout_s)

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        attrs = self._containers.remove(container_id)
        if attrs is None or keep_network:
            return
        network = str((attrs.get("HostConfig") or {}).get("NetworkMode") or "")
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_MANAGED) == "true" and is_tenant_network(network):
            self._networks.remove(network)

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        return self._containers.inspect(name_or_id)

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        return self._containers.with_labels(labels)

    def volumes_reach_every_host(self) -> bool:
        return False  # one engine's volumes are on its disks

    def limits_system_disks(self) -> bool:
        return self._containers.limits_system_disks()

    def writable_layer_bytes(self, container_id: str) -> int | None:
        return self._containers.writable_layer_bytes(container_id)

    def volume_used_bytes(self, name: str) -> int | None:
        return self._volumes.used_bytes(name)

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        return self._containers.exec(container_id, command)

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        self._containers.put_file(container_id, path, data, mode)

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        return checks.run_once(
            self._api, image, command, files, timeout_s=timeout_s, cluster_id=cluster_id
        )

    def container_stats(self, container_id: str) -> ContainerStats | None:
        return self._containers.stats(container_id)

    def container_of_pid(self, pid: int) -> str | None:
        """Read from this host's /proc: only a local engine's processes are here."""
        return container_of_pid(pid) if self._local else None

    def _cpus(self) -> int:
        # The engine refuses a CPU limit above its own core count.
        if self._engine_cpus is None:
            self._engine_cpus = self.engine_info().cpus
        return self._engine_cpus

    # -- tenant networks --------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        self._networks.ensure(name, labels)

    def remove_network(self, name: str) -> None:
        self._networks.remove(name)

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        return self._networks.with_labels(labels)

    # -- service URLs (the HTTP proxy) -------------------------------
    def port_socket(self, container_id: str, port: int) -> PortSocket:
        return self._ports.socket_for(container_id, port)

    # -- exec streams (the SSH gateway) -------------------------------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        with translated(f"start a session in container {container_id}"):
            return self._exec_streams.open(container_id, command, tty, env)

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        with translated(f"resize the terminal of exec {exec_id}"):
            self._exec_streams.resize(exec_id, width, height)

    def exec_exit_code(self, exec_id: str) -> int | None:
        with translated(f"inspect exec {exec_id}"):
            return self._exec_streams.exit_code(exec_id)
