"""Data volumes as PersistentVolumeClaims in their tenant's namespace, sized
by the instance's disk, of the operator's storage class. A claim outlives
the pods that mount it: a stop deletes the pod, never the claim."""

from __future__ import annotations

import contextlib

from gpudock.runtime.base import VolumeState
from gpudock.runtime.kubernetes import home, manifests
from gpudock.runtime.kubernetes.api import Exists, KubeApi, Missing, translated
from gpudock.runtime.kubernetes.tenants import KubeTenants, has_labels, selector


class KubeClaims:
    def __init__(
        self,
        api: KubeApi,
        tenants: KubeTenants,
        options: manifests.PodOptions,
        default_size_gb: int,
    ) -> None:
        self._api, self._tenants, self._options = api, tenants, options
        self._default_size_gb = default_size_gb

    def ensure(self, name: str, labels: dict[str, str], size_gb: int | None) -> None:
        """An existing claim keeps its size (as a Docker volume does)."""
        namespace = self._tenants.ensure_for(labels)
        body = manifests.claim(name, labels, size_gb or self._default_size_gb, self._options)
        with translated(f"create volume claim {name}"):
            try:
                self._api.call(
                    self._api.core.create_namespaced_persistent_volume_claim, namespace, body
                )
            except Exists:
                return
            except Missing:  # the namespace went under this process (another server)
                self._tenants.forget(namespace)
                raise

    def remove(self, name: str) -> None:
        with translated(f"remove volume claim {name}"):
            for item in self._named(name):
                meta = item["metadata"]
                with contextlib.suppress(Missing):
                    self._api.call(
                        self._api.core.delete_namespaced_persistent_volume_claim,
                        meta["name"],
                        meta["namespace"],
                    )

    def _named(self, name: str) -> list[manifests.Obj]:
        found = self._api.call(
            self._api.core.list_persistent_volume_claim_for_all_namespaces,
            field_selector=f"metadata.name={manifests.kube_name(name)}",
        )
        return [
            i for i in found.get("items") or [] if manifests.original_name(i["metadata"]) == name
        ]

    def holds_home(self, name: str) -> bool:
        """Was the claim made to keep /root too (`runtime.kubernetes.home`)?"""
        with translated(f"read volume claim {name}"):
            found = self._named(name)
        return bool(found) and home.has_home(found[0])

    def copy_layout(self, source: str, target: str) -> None:
        """The target (a copy's) is laid out as its source, whatever it was made as."""
        layout = home.HOME_LAYOUT if self.holds_home(source) else None
        with translated(f"label volume claim {target}"):
            for item in self._named(target):
                meta = item["metadata"]
                if ((meta.get("annotations") or {}).get(home.LAYOUT_ANNOTATION)) == layout:
                    continue
                patch = {"metadata": {"annotations": {home.LAYOUT_ANNOTATION: layout}}}
                self._api.call(
                    self._api.core.patch_namespaced_persistent_volume_claim,
                    meta["name"],
                    meta["namespace"],
                    patch,
                )

    def labels_of(self, name: str) -> dict[str, str]:
        """The gpudock labels of the claim (empty if there is none)."""
        with translated(f"read volume claim {name}"):
            found = self._named(name)
        return manifests.gpudock_labels(found[0]["metadata"]) if found else {}

    def with_labels(self, labels: dict[str, str]) -> list[VolumeState]:
        with translated("list volume claims"):
            found = self._api.call(
                self._api.core.list_persistent_volume_claim_for_all_namespaces,
                label_selector=selector(labels),
            )
        states = [
            VolumeState(
                name=manifests.original_name(i["metadata"]),
                labels=manifests.gpudock_labels(i["metadata"]),
            )
            for i in found.get("items") or []
            if not i["metadata"].get("deletionTimestamp")
        ]
        return [s for s in states if has_labels(s.labels, labels)]
