"""`FakeKubeCluster`: the fake apiserver on 127.0.0.1:<free port> in a thread
of its own, its store, optionally its Docker kubelet, and the nodes a test
declares; `kubeconfig()` writes a file any client (ours, `kubectl`) reads.

    with FakeKubeCluster(docker_api) as cluster:
        cluster.add_node("gpu-a", gpus=8, product="NVIDIA-A100-SXM4-80GB")
        runtime = KubernetesRuntime(kubeconfig=cluster.kubeconfig(tmp_path))
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import uvicorn

from tests.support.kube_fake.api import FakeApi
from tests.support.kube_fake.kubelet import DockerKubelet
from tests.support.kube_fake.store import Obj, Resource, Store, by_kind

STARTUP_DEADLINE_S = 30.0
NODES = by_kind("Node")


class FakeKubeCluster:
    def __init__(
        self, docker_api: docker.APIClient | None = None, *, local_volumes: bool = False
    ) -> None:
        """`docker_api`: run pods as containers on that engine (None: pods stay
        Pending); `local_volumes`: claims are node-local storage (`DockerKubelet`)."""
        self.store = Store()
        self.token = secrets.token_hex(16)
        self.name = secrets.token_hex(4)  # labels this cluster's containers and volumes
        self.api = FakeApi(self.store, self.token, docker_api)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        config = uvicorn.Config(self.api.app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._listener]}, name="kfake-apiserver"
        )
        self.kubelet = (
            DockerKubelet(self.store, docker_api, self.name, local_volumes=local_volumes)
            if docker_api
            else None
        )

    def __enter__(self) -> FakeKubeCluster:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake Kubernetes API server did not start")
            time.sleep(0.01)
        if self.kubelet is not None:
            self.kubelet.start()
        return self

    def __exit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet.remove_everything()
        self._server.should_exit = True
        self._thread.join(timeout=STARTUP_DEADLINE_S)
        self._listener.close()

    def kubeconfig(self, directory: Path, *, namespace: str = "default") -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: tester\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\n"
            f"    namespace: {namespace}\n"
            "current-context: fake\n"
        )
        return path

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 0,
        product: str = "",
        cpu: str = "32",
        memory: str = "256Gi",
        labels: dict[str, str] | None = None,
        ready: bool = True,
        hami_memory_mb: int = 0,
    ) -> Obj:
        """A node as NVIDIA's device plugin and GPU feature discovery label one;
        `hami_memory_mb`: each card's memory, offered as HAMi's gpumem and gpucores."""
        all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
            all_labels.setdefault("nvidia.com/gpu.product", product)
            all_labels.setdefault("nvidia.com/gpu.count", str(gpus))
            all_labels.setdefault("nvidia.com/cuda.driver.major", "550")
            all_labels.setdefault("nvidia.com/cuda.driver.minor", "54")
            all_labels.setdefault("nvidia.com/cuda.driver.rev", "15")
            all_labels.setdefault("nvidia.com/cuda.runtime.major", "12")
            all_labels.setdefault("nvidia.com/cuda.runtime.minor", "4")
        if hami_memory_mb:
            allocatable["nvidia.com/gpumem"] = str(gpus * hami_memory_mb)
            allocatable["nvidia.com/gpucores"] = str(gpus * 100)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": {},
            "status": {
                "capacity": dict(allocatable),
                "allocatable": allocatable,
                "conditions": [_ready_condition(ready)],
                "nodeInfo": {
                    "kubeletVersion": "v1.30.0",
                    "containerRuntimeVersion": "docker://fake",
                },
            },
        }
        return self.store.create(NODES, "", node)

    @staticmethod
    def store_node() -> Resource:
        return NODES

    def offer(self, name: str, resources: dict[str, str], labels: dict[str, str]) -> None:
        """The node's device plugin offers these extended resources too (MIG
        slices, as the `mixed` strategy names them), with GFD's labels."""

        def change(node: Obj) -> Obj:
            node["status"]["allocatable"].update(resources)
            node["status"]["capacity"].update(resources)
            node["metadata"]["labels"].update(labels)
            return node

        self.store.update(NODES, "", name, change)

    def cordon(self, name: str, cordoned: bool = True) -> None:
        """`kubectl cordon` (`uncordon` with False): no new pods there."""

        def change(node: Obj) -> Obj:
            node["spec"]["unschedulable"] = cordoned
            return node

        self.store.update(NODES, "", name, change)

    def set_node_ready(self, name: str, ready: bool) -> None:
        def change(node: Obj) -> Obj:
            node["status"]["conditions"] = [_ready_condition(ready)]
            return node

        self.store.update(NODES, "", name, change)

    def evict_pod(self, namespace: str, pod: str, message: str) -> None:
        """The pod's node evicts it (as under memory pressure)."""
        assert self.kubelet is not None, "a cluster without a kubelet runs no pods"
        self.kubelet.evict(self.store.get(by_kind("Pod"), namespace, pod), message)

    def exec(self, namespace: str, pod: str, command: list[str]) -> str:
        """Run `command` in the pod's container (on the Docker Engine, past the
        API: the fake has no exec endpoint); its output."""
        assert self.kubelet is not None, "a cluster without a kubelet runs no pods"
        uid = self.store.get(by_kind("Pod"), namespace, pod)["metadata"]["uid"]
        engine = self.kubelet.api
        found = engine.containers(filters={"label": f"kfake.pod={uid}"})
        assert found, f"pod {namespace}/{pod} has no running container"
        made = engine.exec_create(found[0]["Id"], command)
        output = engine.exec_start(made["Id"])
        assert engine.exec_inspect(made["Id"])["ExitCode"] == 0, output
        return bytes(output).decode()

    def objects(self, kind: str, namespace: str | None = None, **labels: Any) -> list[Obj]:
        """What the store holds of `kind`, as a test asserts on it."""
        items, _ = self.store.list(
            by_kind(kind),
            namespace,
            lambda o: all(o["metadata"].get("labels", {}).get(k) == v for k, v in labels.items()),
        )
        return items


def _ready_condition(ready: bool) -> Obj:
    return {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": "kubelet is posting ready status"
        if ready
        else "Kubelet stopped posting node status.",
    }


DEBIAN_KUBECTL = Path("/opt/debian-kubectl/usr/bin/kubectl")  # scripts/setup.sh --tests


def kubectl(cluster: FakeKubeCluster, home: Path, *args: str, timeout_s: float = 60.0) -> str:
    """Debian's kubectl against the fake, with a kubeconfig and a cache of its own;
    fails (never skips) without it. Returns its standard output."""
    import subprocess

    import pytest

    if not DEBIAN_KUBECTL.exists():
        pytest.fail(f"{DEBIAN_KUBECTL} is missing: run scripts/setup.sh --tests")
    env = {"KUBECONFIG": str(cluster.kubeconfig(home)), "HOME": str(home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(DEBIAN_KUBECTL), *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


# An image the fake's kubelet has and gpudock treats as a registry's (the base
# image itself is one gpudock refuses to ask a registry for: it is built on the host).
TEST_IMAGE = "localhost/kfake-base:bookworm"


def tag_test_image(engine: docker.APIClient) -> str:
    from gpudock.images.base_image import BASE_IMAGE

    repository, _, tag = TEST_IMAGE.rpartition(":")
    engine.tag(BASE_IMAGE, repository, tag)
    return TEST_IMAGE
