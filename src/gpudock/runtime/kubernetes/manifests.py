"""What gpudock's runtime objects become on Kubernetes, as pure functions:
an instance's container is a Pod (hardened as Docker's container is), its
data volume a PersistentVolumeClaim, a tenant network a Namespace with a
NetworkPolicy; and back, a Pod (or the recorded manifest of a stopped one)
as a `ContainerState`.

Names and labels: Kubernetes wants DNS-1123 names and short label values
(no commas: `gpudock.gpus` lists UUIDs). Every gpudock label is also kept as
an annotation, verbatim, and read back from there; labels carry the ones a
selector can hold, which are the ones gpudock selects by (managed, cluster,
instance, user). A name that is not a DNS-1123 label becomes one (lowered,
hashed) and the original is kept in the `gpudock.name` annotation.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpudock.runtime.base import (
    ALLOWED_CAPABILITIES,
    LABEL_CLUSTER,
    LABEL_HOST,
    LABEL_OWNER,
    ContainerSpec,
    ContainerState,
    shm_size_mb,
)
from gpudock.runtime.kubernetes import home

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
ANNOTATION_NAME = "gpudock.name"
ANNOTATION_FINISHED = "gpudock.finished-at"  # on a stopped instance's recorded manifest
MANIFEST_KEY = "pod.json"
ENVIRONMENT_KEY = "environment"  # the record's /etc/environment for a share's pod
HAMI_MEMORY = "nvidia.com/gpumem"  # MiB of the card
HAMI_CORES = "nvidia.com/gpucores"  # percent of its SMs
CONTAINER = "main"
# A pod's `status.reason` when the cluster, not its process, ended it.
CLUSTER_ENDED = frozenset(
    {"Evicted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown", "UnexpectedAdmissionError"}
)
POLICY_NAME = "gpudock-tenant-isolation"
KEEPALIVE_ARGS = ["sleep", "infinity"]
JOB_SHELL = ["/bin/sh", "-c"]
# Tenants reach the internet, not the cluster's or the provider's private
# networks (nor the cloud metadata service at 169.254.169.254).
PRIVATE_RANGES = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class PodOptions:
    """What the operator decides for every pod (settings `GPUDOCK_KUBERNETES_*`)."""

    gpu_resource: str = GPU_RESOURCE
    storage_class: str | None = None
    image_pull_policy: str = "IfNotPresent"
    hami: bool = False  # a share asks HAMi for its memory and cores (else a whole GPU)
    # Claims attach on every node (network storage): a move takes the same claim along.
    shared_storage: bool = False
    # New claims keep /root too (`runtime.kubernetes.home`): the system disk survives a stop.
    home: bool = False


def kube_name(name: str) -> str:
    """`name` if it is a DNS-1123 label, else one made from it (stable)."""
    if len(name) <= 63 and _DNS_LABEL.match(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-")
    return f"{cleaned or 'x'}-{digest}"


def tenant_namespace(labels: dict[str, str]) -> str:
    """The namespace an object of these labels lives in: its tenant's
    (`gpudock-<cluster>-u-<user>`, the name gpudock gives tenant networks),
    or the installation's own for what belongs to no tenant."""
    cluster = labels.get(LABEL_CLUSTER, "")
    owner = labels.get(LABEL_OWNER, "")
    if owner:
        return kube_name(f"gpudock-{cluster}-u-{owner}")
    return kube_name(f"gpudock-{cluster}" if cluster else "gpudock")


def metadata(name: str, labels: dict[str, str], namespace: str | None = None) -> Obj:
    meta: Obj = {
        "name": kube_name(name),
        "labels": {k: v for k, v in labels.items() if _LABEL_VALUE.match(v) and len(v) <= 63},
        "annotations": {**labels, ANNOTATION_NAME: name},
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def gpudock_labels(meta: Obj) -> dict[str, str]:
    """The labels gpudock gave the object, as it gave them."""
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    labels.update({k: v for k, v in annotations.items() if k.startswith("gpudock.")})
    labels.pop(ANNOTATION_NAME, None)
    labels.pop(ANNOTATION_FINISHED, None)
    return labels


def original_name(meta: Obj) -> str:
    return str((meta.get("annotations") or {}).get(ANNOTATION_NAME) or meta.get("name") or "")


# -- the pod -------------------------------------------------------------------
def pod(
    spec: ContainerSpec,
    options: PodOptions,
    *,
    with_home: bool = False,
    mig_slice: str | None = None,
) -> Obj:
    """`with_home`: the claim keeps /root too (`runtime.kubernetes.home`);
    `mig_slice`: the MIG resource a share asks for instead of a whole GPU
    (`runtime.kubernetes.mig`)."""
    namespace = tenant_namespace(spec.labels)
    gpus = len(spec.gpu_uuids)
    pod_spec: Obj = {
        "hostname": kube_name(spec.hostname),
        "restartPolicy": "Never",  # gpudock's reconciler restarts, as on Docker
        "terminationGracePeriodSeconds": spec.stop_timeout_s,
        "automountServiceAccountToken": False,  # no API credentials inside an instance
        "enableServiceLinks": False,
        "containers": [_container(spec, options, gpus, mig_slice)],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": kube_name(spec.volume_name)}},
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_size_mb(spec)}Mi"},
            },
        ],
    }
    if hami_share(spec, options):
        # The limits also in /etc/environment, so daemons a user starts later
        # (with a login's environment, not the container's) keep them.
        pod_spec["volumes"].append(
            {
                "name": "environment",
                "configMap": {
                    "name": kube_name(spec.name),
                    "items": [{"key": ENVIRONMENT_KEY, "path": "environment"}],
                },
            }
        )
        pod_spec["containers"][0]["volumeMounts"].append(
            {"name": "environment", "mountPath": "/etc/environment", "subPath": "environment"}
        )
    host = spec.labels.get(LABEL_HOST)
    if host:
        pod_spec["nodeName"] = host  # gpudock's placement chose the node
    if gpus:
        pod_spec["tolerations"] = [
            {"key": options.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}
        ]
    made = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(spec.name, spec.labels, namespace),
        "spec": pod_spec,
    }
    return home.with_home(made) if with_home else made


def _container(spec: ContainerSpec, options: PodOptions, gpus: int, mig_slice: str | None) -> Obj:
    env = dict(spec.env)
    if gpus:
        # The device plugin names the devices it allocated; gpudock's UUIDs are
        # its own accounting and mean nothing to the node's runtime.
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    limits: Obj = {"cpu": _cpu(spec.cpus), "memory": f"{spec.memory_mb}Mi"}
    if mig_slice is not None:
        limits[mig_slice] = "1"  # the slice is the share's GPU
    elif gpus:
        limits[options.gpu_resource] = str(gpus)
    if hami_share(spec, options):
        env.update(share_limits(spec))
        limits[HAMI_MEMORY] = str(spec.share_memory_mb)
        limits[HAMI_CORES] = str(share_cores(spec))
    return {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": options.image_pull_policy,
        # Arguments to the image's entry point, as Docker's CMD is.
        "args": [*JOB_SHELL, spec.command] if spec.command else list(KEEPALIVE_ARGS),
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": {"requests": dict(limits), "limits": limits},
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(ALLOWED_CAPABILITIES)},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": spec.volume_mount},
            {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108 (the container's own)
        ],
    }


def hami_share(spec: ContainerSpec, options: PodOptions) -> bool:
    return options.hami and spec.share_milli is not None and bool(spec.gpu_uuids)


def share_cores(spec: ContainerSpec) -> int:
    return max(1, (spec.share_milli or 0) // 10)


def share_limits(spec: ContainerSpec) -> dict[str, str]:
    """What HAMi-core enforces in the container, as gpudock's Docker shares say it."""
    return {
        "CUDA_DEVICE_MEMORY_LIMIT": f"{spec.share_memory_mb}m",
        "CUDA_DEVICE_SM_LIMIT": str(share_cores(spec)),
    }


def _cpu(cpus: float) -> str:
    return f"{round(cpus * 1000)}m"


def recorded(pod_manifest: Obj, labels: dict[str, str]) -> Obj:
    """The ConfigMap that holds a created (or stopped) instance's pod manifest:
    the "container" that exists while no pod runs; for a share under HAMi, also
    the /etc/environment its pod mounts."""
    meta = pod_manifest["metadata"]
    data = {MANIFEST_KEY: json.dumps(pod_manifest, sort_keys=True)}
    env = {e["name"]: e["value"] for e in pod_manifest["spec"]["containers"][0]["env"]}
    if any(v.get("name") == "environment" for v in pod_manifest["spec"]["volumes"]):
        lines = [f'{k}="{env[k]}"' for k in ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")]
        data[ENVIRONMENT_KEY] = "\n".join(lines) + "\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(original_name(meta), labels, meta["namespace"]),
        "data": data,
    }


# -- volumes and tenants -------------------------------------------------------
def claim(name: str, labels: dict[str, str], size_gb: int, options: PodOptions) -> Obj:
    spec: Obj = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{size_gb}Gi"}},
    }
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    meta = metadata(name, labels, tenant_namespace(labels))
    if options.home:
        meta.setdefault("annotations", {})[home.LAYOUT_ANNOTATION] = home.HOME_LAYOUT
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
    }


def namespace(name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(name, labels)}


def isolation_policy(namespace_name: str, labels: dict[str, str]) -> Obj:
    """Pods of the namespace take connections from each other only, and reach
    each other, the cluster's DNS and the internet, nothing private."""
    everyone_here: list[Obj] = [{"podSelector": {}}]
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    internet = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(POLICY_NAME, labels, namespace_name),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": everyone_here}],
            "egress": [{"to": everyone_here}, dns, internet],
        },
    }


# -- back: states --------------------------------------------------------------
def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def state_of_pod(found: Obj) -> ContainerState:
    meta, status = found["metadata"], found.get("status") or {}
    statuses = status.get("containerStatuses") or [{}]
    current = statuses[0].get("state") or {}
    running = "running" in current and not meta.get("deletionTimestamp")
    ended = current.get("terminated") or {}
    phase = str(status.get("phase") or "Pending")
    return ContainerState(
        id=f"{meta['namespace']}/{meta['name']}",
        name=original_name(meta),
        running=running,
        status="running" if running else ("exited" if ended else phase.lower()),
        labels=gpudock_labels(meta),
        started_at=parse_time((current.get("running") or ended).get("startedAt")),
        finished_at=parse_time(ended.get("finishedAt")),
        exit_code=ended.get("exitCode"),
        oom_killed=ended.get("reason") == "OOMKilled",
        created_at=parse_time(meta.get("creationTimestamp")),
        fault=fault_of(status) if not running else None,
    )


def fault_of(status: Obj) -> str | None:
    """Why the cluster ended the pod, when it did and not its process: an
    eviction (the kubelet's under node pressure, the eviction API's, a
    preemption: `DisruptionTarget`, Kubernetes 1.26+), a node shut down or
    lost, an admission the kubelet took back. None for the workload's own exit."""
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    disrupted = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if reason in CLUSTER_ENDED or reason.startswith("OutOf"):
        return f"{reason}: {message}" if message else reason
    if disrupted is not None:
        said = disrupted.get("message") or disrupted.get("reason") or "disrupted"
        return f"{disrupted.get('reason') or 'DisruptionTarget'}: {said}"
    return None


def state_of_record(found: Obj) -> ContainerState:
    """A stopped (or not yet started) instance: its manifest, no pod."""
    meta = found["metadata"]
    finished = (meta.get("annotations") or {}).get(ANNOTATION_FINISHED)
    return ContainerState(
        id=f"{meta['namespace']}/{meta['name']}",
        name=original_name(meta),
        running=False,
        status="exited" if finished else "created",
        labels=gpudock_labels(meta),
        finished_at=parse_time(finished),
        created_at=parse_time(meta.get("creationTimestamp")),
    )


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
