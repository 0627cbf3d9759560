"""`KubernetesRuntime`: the `Runtime` seam over one Kubernetes cluster, the
whole cluster one backend (`GPUDOCK_RUNTIME=kubernetes`), composed of one
collaborator per kind of object (pods, claims, tenant namespaces).

What cannot work on Kubernetes yet raises `RuntimeFailure` saying so
(`unsupported`); docs/kubernetes.md lists it. Images are the nodes' business:
the kubelet pulls what a pod names, so the server neither pulls nor inspects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import (
    LABEL_HOST,
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
    VolumeState,
)
from gpudock.runtime.kubernetes import copies, manifests, streaming
from gpudock.runtime.kubernetes.api import KubeApi, Missing, connect, translated
from gpudock.runtime.kubernetes.claims import KubeClaims
from gpudock.runtime.kubernetes.exec import PodExecs
from gpudock.runtime.kubernetes.pods import KubePods
from gpudock.runtime.kubernetes.ports import PodPorts
from gpudock.runtime.kubernetes.tenants import KubeTenants
from gpudock.runtime.kubernetes.units import bytes_of, cpus_of


def unsupported(what: str) -> NoReturn:
    raise RuntimeFailure(f"{what} does not work on the Kubernetes runtime yet")


class KubernetesRuntime:
    """Implements `gpudock.runtime.base.Runtime` over one Kubernetes cluster."""

    def __init__(
        self,
        kubeconfig: Path | None = None,
        *,
        context: str | None = None,
        timeout_s: float = 30.0,
        start_timeout_s: float = 300.0,
        options: manifests.PodOptions | None = None,
        default_disk_gb: int = 50,
        copy_timeout_s: float = 24 * 3600.0,
        api: KubeApi | None = None,
    ) -> None:
        """`kubeconfig` (and its `context`); None: the service account of the
        pod gpudock runs in. `timeout_s`: each API call's. `start_timeout_s`:
        how long `start_container` waits for a pod to run (image pulls included)
        before the reconciler is told to come back."""
        self._api = api or connect(kubeconfig, context, timeout_s)
        self._copy_timeout_s = copy_timeout_s
        options = options or manifests.PodOptions()
        self._options = options
        self._tenants = KubeTenants(self._api)
        self._pods = KubePods(self._api, self._tenants, options, start_timeout_s)
        self._claims = KubeClaims(self._api, self._tenants, options, default_disk_gb)
        self._execs = PodExecs(self._api)
        self._streams = streaming.ClaimStreams(self._pods, self._execs, copy_timeout_s)
        self._ports = PodPorts(self._api)

    def close(self) -> None:
        self._api.close()

    @property
    def api(self) -> KubeApi:
        """The connection, for the GPU inventory read from the same cluster."""
        return self._api

    # -- the cluster and images --------------------------------------------
    def engine_info(self) -> EngineInfo:
        """The cluster's allocatable CPUs and memory, all nodes together."""
        with translated("read the cluster's nodes"):
            nodes = self._api.call(self._api.core.list_node).get("items") or []
            version = self._api.call(self._api.version.get_code)
        allocatable = [(n.get("status") or {}).get("allocatable") or {} for n in nodes]
        return EngineInfo(
            cpus=int(sum(cpus_of(a.get("cpu", "0")) for a in allocatable)),
            memory_bytes=int(sum(bytes_of(a.get("memory", "0")) for a in allocatable)),
            server_version=str(version.get("gitVersion", "")),
        )

    def image_present(self, ref: str) -> bool:
        return False  # the nodes' image caches are theirs: the kubelet pulls at start

    def image_pullable(self, ref: str) -> bool:
        return True  # asked of the registry by the kubelet, at start (ErrImagePull)

    def ensure_image(self, ref: str) -> None:
        """Nothing to do here: the pod's kubelet pulls (imagePullPolicy)."""

    def image_info(self, ref: str) -> ImageInfo | None:
        return None

    def image_size(self, ref: str) -> int | None:
        return None

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        return []  # the nodes' image caches are theirs

    def remove_image(self, ref: str) -> None:
        """The nodes' kubelets collect unused images themselves."""

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        unsupported("committing an instance's system disk as an image")

    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        unsupported("building images")

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        unsupported("image validation runs")

    # -- volumes -----------------------------------------------------------
    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        self._claims.ensure(name, labels, size_gb)

    def remove_volume(self, name: str) -> None:
        self._claims.remove(name)

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        return self._claims.with_labels(labels)

    def volume_used_bytes(self, name: str) -> int | None:
        return None  # the volume's file system is on a node (or a storage system)

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
        """Between claims of two nodes whose source node is Ready: streamed from
        a pod on each (`runtime.kubernetes.streaming`), which node-local storage
        needs. Else one helper pod on the target's node mounts both and mirrors
        one into the other (`runtime.kubernetes.copies`): network storage lets
        it; a claim that cannot attach there leaves the helper waiting, and the
        move waits with the kubelet's reason."""
        node = self._claims.labels_of(target).get(LABEL_HOST)
        source_node = self._claims.labels_of(source).get(LABEL_HOST)
        if node and source_node and node != source_node and self._node_ready(source_node):
            copied = self._streams.copy(
                streaming.Side(source, source_node),
                streaming.Side(target, node),
                image=image,
                helper_name=helper_name,
                labels=labels,
                on_progress=on_progress,
            )
            self._claims.copy_layout(source, target)  # a home travels as a home
            return copied
        # On the target's node: a claim that waits for its first consumer binds there.
        manifest = copies.helper_pod(helper_name, labels, image, source, target, node)
        meta = manifest["metadata"]
        try:
            self._pods.hold(manifest, f"the copy of {source} to node {node}")
            with translated(f"copy volume {source} to {target}"):
                ended = self._pods.until_ended(
                    meta["namespace"], meta["name"], self._copy_timeout_s
                )
        finally:
            self._pods.remove_pod(meta["namespace"], meta["name"])
        copied = copies.copied_bytes(ended, helper_name, self._copy_timeout_s)
        self._claims.copy_layout(source, target)  # a home travels as a home
        if on_progress is not None:
            on_progress(copied, copied)
        return copied

    def _node_ready(self, node: str) -> bool:
        with translated(f"read node {node}"):
            try:
                found = self._api.call(self._api.core.read_node, node)
            except Missing:
                return False
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    # -- containers (pods) ---------------------------------------------------
    def create_container(self, spec: ContainerSpec) -> ContainerState:
        """A claim made to keep /root mounts its home there (`runtime.kubernetes.home`)."""
        return self._pods.create(spec, with_home=self._claims.holds_home(spec.volume_name))

    def start_container(self, container_id: str) -> ContainerState:
        return self._pods.start(container_id)

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        return self._pods.stop(container_id, timeout_s)

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        """The tenant's namespace stays (it holds the claims); garbage
        collection removes it once nothing of gpudock's is left in it."""
        self._pods.remove(container_id)

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        return self._pods.inspect(name_or_id)

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        return self._pods.with_labels(labels)

    def volumes_reach_every_host(self) -> bool:
        return self._options.shared_storage

    def limits_system_disks(self) -> bool:
        return False

    def writable_layer_bytes(self, container_id: str) -> int | None:
        return None

    def container_stats(self, container_id: str) -> ContainerStats | None:
        return None  # metrics.k8s.io is not read yet

    def container_of_pid(self, pid: int) -> str | None:
        return None  # the nodes' processes cannot be seen from the server

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        namespace, name = self._running(container_id)
        with translated(f"exec in container {container_id}"):
            return self._execs.run(namespace, name, command, b"", self._api.timeout_s)

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        """Written by a shell in the pod, the data on its stdin: needs `sh` and
        `cat` in the image (a pod has no archive endpoint)."""
        namespace, name = self._running(container_id)
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        command = ["sh", "-c", script, "put_file", path, f"{mode:o}"]
        with translated(f"copy {path} into {container_id}"):
            done = self._execs.run(namespace, name, command, data, self._api.timeout_s)
        if done.exit_code != 0:
            raise RuntimeFailure(f"could not write {path} in {container_id}: {done.output!r}")

    def _running(self, container_id: str) -> tuple[str, str]:
        state = self._pods.inspect(container_id)
        if state is None or not state.running:
            raise RuntimeFailure(f"container {container_id} is not running")
        namespace, _, name = state.id.partition("/")
        return namespace, name

    # -- tenant networks (namespaces) ------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        self._tenants.ensure(name, labels)

    def remove_network(self, name: str) -> None:
        self._tenants.remove(name)

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        return self._tenants.with_labels(labels)

    # -- sessions and service URLs -------------------------------------------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        """Pod exec over WebSocket (see `runtime.kubernetes.exec`)."""
        namespace, name = self._running(container_id)
        with translated(f"start a session in container {container_id}"):
            return self._execs.open(namespace, name, command, tty, env)

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        self._execs.resize(exec_id, width, height)

    def exec_exit_code(self, exec_id: str) -> int | None:
        return self._execs.exit_code(exec_id)

    def port_socket(self, container_id: str, port: int) -> PortSocket:
        """Pod port-forward behind a one-shot listener (see `runtime.kubernetes.ports`)."""
        namespace, name = self._running(container_id)
        return self._ports.socket_for(namespace, name, port)
