"""GPU inventory read from a Kubernetes cluster's nodes, as NVIDIA's device
plugin and GPU feature discovery (GFD) label them: every schedulable node
with `nvidia.com/gpu` allocatable is a host.

- model: the `nvidia.com/gpu.product` label in gpudock's naming
  (`canonical_model_name`, the memory from `nvidia.com/gpu.memory` where the
  product does not say it); a product it cannot name is kept as it is;
- count: the allocatable `nvidia.com/gpu` (what the device plugin offers now);
- driver and CUDA: GFD's `nvidia.com/cuda.driver.*` and `nvidia.com/cuda.runtime.*`
  (older GFD: `...driver-version.*`, `...runtime-version.*`) for the image pre-flight.

The device plugin, not gpudock, picks which physical GPU a pod gets: a GPU's
UUID here is gpudock's slot on that node (stable: derived from the node and
the index), so placement counts GPUs per node rather than naming devices.

Health: a node that is not Ready, or whose allocatable count dropped below
the GPUs it had, reports `gpu_lost` for the GPUs it no longer offers.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.exceptions import ApiException

from gpudock.gpu.base import (
    GpuDiscoveryError,
    GpuInfo,
    GpuProcess,
    GpuUtilisation,
    HealthEvent,
    HostInfo,
    canonical_model_name,
)

GPU_RESOURCE = "nvidia.com/gpu"
_UUID_NAMESPACE = uuid.UUID("3b0c1f0e-7c0a-4f5e-9a7e-2d5b8e4a6c11")
_MEMORY_IN_NAME = re.compile(r"\d+\s*GB", re.IGNORECASE)
Obj = dict[str, Any]


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def model_of(labels: dict[str, str]) -> tuple[str, int]:
    """gpudock's model name for the node's GPUs and their memory in MiB (0: not said)."""
    product = labels.get("nvidia.com/gpu.product", "")
    memory_mb = int(labels.get("nvidia.com/gpu.memory", "0") or 0)
    words = product.replace("-", " ").replace("_", " ")
    if not product or not (memory_mb or _MEMORY_IN_NAME.search(words)):
        return product or "unknown", memory_mb
    model = canonical_model_name(words, memory_mb)
    if not memory_mb:
        memory_mb = int(model.rsplit("-", 1)[1].removesuffix("GB")) * 1024
    return model, memory_mb


def _version(labels: dict[str, str], kind: str, parts: tuple[str, ...]) -> str:
    for prefix in (f"nvidia.com/cuda.{kind}.", f"nvidia.com/cuda.{kind}-version."):
        found = [labels.get(prefix + part) for part in parts]
        if all(found):
            return ".".join(str(f) for f in found)
    return ""


def _quantity(text: str) -> float:
    text = str(text)
    factors = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    for suffix, factor in factors.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text or 0)


def host_of(node: Obj, gpu_resource: str) -> HostInfo | None:
    """The host a node is, or None: no GPUs offered, or cordoned."""
    meta, status = node["metadata"], node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or allocatable
    count = int(_quantity(capacity.get(gpu_resource, "0")))
    if count == 0 or (node.get("spec") or {}).get("unschedulable"):
        return None
    labels = meta.get("labels") or {}
    model, memory_mb = model_of(labels)
    name = str(meta["name"])
    return HostInfo(
        name=name,
        cpus=_quantity(allocatable.get("cpu", "0")),
        memory_gb=int(_quantity(allocatable.get("memory", "0")) // 2**30),
        driver_version=_version(labels, "driver", ("major", "minor", "rev")),
        cuda_version=_version(labels, "runtime", ("major", "minor")),
        simulated=False,
        gpus=tuple(
            GpuInfo(uuid=gpu_uuid(name, i), index=i, model=model, memory_mb=memory_mb)
            for i in range(count)
        ),
    )


def lost_gpus(node: Obj, gpu_resource: str) -> list[HealthEvent]:
    """`gpu_lost` for each GPU the node no longer offers (all, if it is not Ready)."""
    name, status = node["metadata"]["name"], node.get("status") or {}
    capacity = int(_quantity((status.get("capacity") or {}).get(gpu_resource, "0")))
    offered = int(_quantity((status.get("allocatable") or {}).get(gpu_resource, "0")))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    first_lost = 0 if not ready else offered
    why = "node is not Ready" if not ready else "the device plugin offers fewer GPUs"
    return [
        HealthEvent(gpu_uuid=gpu_uuid(name, i), kind="gpu_lost", message=f"{name}: {why}")
        for i in range(first_lost, capacity)
    ]


class KubernetesNodeSource:
    """Implements `GpuSource` over a cluster's nodes."""

    hosts_change = True  # nodes join, leave, are cordoned

    def __init__(self, core: CoreV1Api, gpu_resource: str = GPU_RESOURCE) -> None:
        self._core, self._gpu_resource = core, gpu_resource

    @classmethod
    def connect(
        cls, kubeconfig: Path | None, context: str | None, gpu_resource: str = GPU_RESOURCE
    ) -> KubernetesNodeSource:
        try:
            if kubeconfig is not None:
                api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig), context=context, persist_config=False
                )
            else:
                configuration = client.Configuration()
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
                api_client = client.ApiClient(configuration)
        except (config.ConfigException, OSError) as exc:
            raise GpuDiscoveryError(f"could not read the Kubernetes credentials: {exc}") from exc
        return cls(CoreV1Api(api_client), gpu_resource)

    def _nodes(self) -> list[Obj]:
        try:
            response: Any = self._core.list_node(_preload_content=False, _request_timeout=30)
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)
            items: list[Obj] = json.loads(response.data).get("items") or []
        except ApiException as exc:
            raise GpuDiscoveryError(f"could not list the cluster's nodes: {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise GpuDiscoveryError(f"the Kubernetes API is unreachable: {exc}") from exc
        return items

    def discover(self) -> list[HostInfo]:
        hosts = (host_of(node, self._gpu_resource) for node in self._nodes())
        return [h for h in hosts if h is not None]

    def poll_health(self, timeout_ms: int) -> list[HealthEvent]:
        """Read now (a node's conditions are polled, not waited for)."""
        return [e for node in self._nodes() for e in lost_gpus(node, self._gpu_resource)]

    def process_memory(self) -> list[GpuProcess]:
        return []  # the nodes' processes cannot be seen from the server

    def read_utilisation(self) -> GpuUtilisation:
        return GpuUtilisation()
