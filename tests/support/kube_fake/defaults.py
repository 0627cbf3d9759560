"""What the apiserver fills in on create (its defaulting and the controllers
that act at once): a namespace is Active and labelled with its name, a pod is
Pending with its spec defaulted, a claim is bound by the provisioner, a
service gets a cluster IP. Enough of each for clients to read what they expect."""

from __future__ import annotations

import copy
import itertools

from tests.support.kube_fake.store import Obj, Resource, now_rfc3339

_cluster_ips = itertools.count(10)


def on_create(res: Resource, given: Obj) -> Obj:
    obj = copy.deepcopy(given)
    obj["kind"], obj["apiVersion"] = res.kind, res.api_version
    meta = obj.setdefault("metadata", {})
    if res.kind == "Namespace":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif res.kind == "Pod":
        _pod(obj)
    elif res.kind == "PersistentVolumeClaim":
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("storageClassName", "standard")
        spec["volumeName"] = f"pvc-{meta['name']}"
        requests = (spec.get("resources") or {}).get("requests") or {}
        obj["status"] = {
            "phase": "Bound",
            "accessModes": spec.get("accessModes", ["ReadWriteOnce"]),
            "capacity": {"storage": requests.get("storage", "1Gi")},
        }
    elif res.kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        ip = next(_cluster_ips)
        spec.setdefault("clusterIP", f"10.96.{ip // 250}.{ip % 250 + 1}")
        spec["clusterIPs"] = [spec["clusterIP"]]
        obj["status"] = {"loadBalancer": {}}
    elif res.kind == "Node":
        obj.setdefault("status", {})
    return obj


def _pod(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for container in spec.get("containers", []):
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        latest = ":" not in container["image"].rsplit("/", 1)[-1] or container["image"].endswith(
            ":latest"
        )
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    status: Obj = {"phase": "Pending", "qosClass": _qos_class(spec)}
    if spec.get("nodeName"):
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
        ]
    obj["status"] = status


def _qos_class(spec: Obj) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers", [])]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k)
        and (r.get("requests") or r.get("limits") or {}).get(k) == r["limits"][k]
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"
