"""Tenant networks as namespaces: each tenant's pods and claims live in a
namespace of their own (`manifests.tenant_namespace`), isolated by a
NetworkPolicy (`manifests.isolation_policy`); a namespace goes only once it
holds nothing of gpudock's, since removing it would take the claims with it."""

from __future__ import annotations

import contextlib

from gpudock.runtime.base import LABEL_CLUSTER, LABEL_MANAGED, LABEL_OWNER, NetworkState
from gpudock.runtime.kubernetes import manifests
from gpudock.runtime.kubernetes.api import Exists, KubeApi, Missing, translated


def selector(labels: dict[str, str]) -> str:
    """A label selector for the labels whose values a selector can hold (the
    others are filtered by the caller, from the annotations)."""
    return ",".join(
        f"{k}={v}" for k, v in sorted(manifests.metadata("x", labels)["labels"].items())
    )


def has_labels(found: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(found.get(k) == v for k, v in wanted.items())


class KubeTenants:
    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._ensured: set[str] = set()

    def ensure(self, name: str, labels: dict[str, str]) -> str:
        """The namespace and its policy, made unless this process made them before."""
        namespace = manifests.kube_name(name)
        if namespace in self._ensured:
            return namespace
        with translated(f"create namespace {namespace}"):
            with contextlib.suppress(Exists):
                self._api.call(self._api.core.create_namespace, manifests.namespace(name, labels))
            with contextlib.suppress(Exists):
                self._api.call(
                    self._api.networking.create_namespaced_network_policy,
                    namespace,
                    manifests.isolation_policy(namespace, labels),
                )
        self._ensured.add(namespace)
        return namespace

    def ensure_for(self, labels: dict[str, str]) -> str:
        """The namespace an object of `labels` lives in."""
        kept = {k: labels[k] for k in (LABEL_MANAGED, LABEL_CLUSTER, LABEL_OWNER) if k in labels}
        return self.ensure(manifests.tenant_namespace(labels), kept)

    def forget(self, namespace: str) -> None:
        self._ensured.discard(namespace)

    def remove(self, name: str) -> None:
        """Delete the namespace unless gpudock still has a pod, a recorded
        manifest or a claim in it; silent if it does not exist."""
        namespace = manifests.kube_name(name)
        core, managed = self._api.core, f"{LABEL_MANAGED}=true"
        with translated(f"remove namespace {namespace}"):
            for listing in (
                core.list_namespaced_pod,
                core.list_namespaced_config_map,
                core.list_namespaced_persistent_volume_claim,
            ):
                try:
                    found = self._api.call(listing, namespace, label_selector=managed, limit=1)
                except Missing:
                    return
                if found.get("items"):
                    return
            with contextlib.suppress(Missing):
                self._api.call(core.delete_namespace, namespace)
        self._ensured.discard(namespace)

    def with_labels(self, labels: dict[str, str]) -> list[NetworkState]:
        with translated("list namespaces"):
            found = self._api.call(self._api.core.list_namespace, label_selector=selector(labels))
        states = [
            NetworkState(
                name=manifests.original_name(item["metadata"]),
                labels=manifests.gpudock_labels(item["metadata"]),
            )
            for item in found.get("items") or []
            if not item["metadata"].get("deletionTimestamp")
        ]
        return [s for s in states if has_labels(s.labels, labels)]
