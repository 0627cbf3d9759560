"""Instance containers as pods, and the create/start split of the `Runtime`
contract mapped onto them:

- create records the pod's manifest in a ConfigMap of the same name in the
  tenant's namespace: that record is the "container" that exists while no
  pod runs (created, or stopped). A record made for another spec (other GPUs,
  another node) is replaced while no pod runs: on Kubernetes there is no
  writable layer to carry over, so nothing is committed;
- start creates the pod from the record and waits (a watch, bounded by the
  start timeout) until its container runs; an image that cannot be pulled or
  a pod the kubelet refused is a `RuntimeFailure` with the kubelet's reason;
- stop deletes the pod with the grace period as its termination grace, waits
  until it is gone and notes on the record when it ended;
- remove deletes the pod at once and the record.

Ids are `<namespace>/<name>`; a bare name (as the reconciler passes) is found
across namespaces by a field selector on `metadata.name`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

from kubernetes.client.exceptions import ApiException

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import (
    LABEL_GPUS,
    LABEL_HOST,
    LABEL_MANAGED,
    ContainerSpec,
    ContainerState,
)
from gpudock.runtime.kubernetes import manifests, mig
from gpudock.runtime.kubernetes.api import Exists, KubeApi, Missing, Obj, expired, translated
from gpudock.runtime.kubernetes.tenants import KubeTenants, has_labels, selector

# Waiting reasons after which the pod will not run without a change of spec.
FATAL_WAITING = {
    "ErrImageNeverPull",
    "InvalidImageName",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
REMOVAL_GRACE_S = 30.0  # beyond the termination grace, for the kubelet to report


class KubePods:
    def __init__(
        self,
        api: KubeApi,
        tenants: KubeTenants,
        options: manifests.PodOptions,
        start_timeout_s: float,
    ) -> None:
        self._api, self._tenants, self._options = api, tenants, options
        self._start_timeout_s = start_timeout_s

    # -- finding -----------------------------------------------------------
    def locate(self, name_or_id: str) -> tuple[str, str] | None:
        """(namespace, name) of the record or pod, or None."""
        if "/" in name_or_id:
            namespace, _, name = name_or_id.partition("/")
            return namespace, name
        name = manifests.kube_name(name_or_id)
        wanted = {
            "field_selector": f"metadata.name={name}",
            "label_selector": f"{LABEL_MANAGED}=true",
        }
        core = self._api.core
        for listing in (core.list_config_map_for_all_namespaces, core.list_pod_for_all_namespaces):
            items = self._api.call(listing, **wanted).get("items") or []
            if items:
                return str(items[0]["metadata"]["namespace"]), name
        return None

    def _record(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._api.call(self._api.core.read_namespaced_config_map, name, namespace)
        except Missing:
            return None

    def _pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._api.call(self._api.core.read_namespaced_pod, name, namespace)
        except Missing:
            return None

    # -- the contract ------------------------------------------------------
    def create(self, spec: ContainerSpec, *, with_home: bool = False) -> ContainerState:
        mig_slice = self._mig_slice(spec)
        pod = manifests.pod(spec, self._options, with_home=with_home, mig_slice=mig_slice)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if spec.network:
            self._tenants.ensure(spec.network, spec.network_labels)
        else:
            self._tenants.ensure_for(spec.labels)
        record = manifests.recorded(pod, spec.labels)
        core = self._api.core
        with translated(f"create container {spec.name}"):
            try:
                made = self._api.call(core.create_namespaced_config_map, namespace, record)
            except Exists:
                running = self._pod(namespace, name)
                if running is not None and _same_placement(running, pod):
                    return manifests.state_of_pod(running)  # an earlier attempt started it
                if running is not None:  # made for other GPUs or another node: no layer to keep
                    self._delete_pod(namespace, name, grace_s=0)
                    self._wait_gone(namespace, name, running, REMOVAL_GRACE_S)
                made = self._api.call(core.replace_namespaced_config_map, name, namespace, record)
        return manifests.state_of_record(made)

    def _mig_slice(self, spec: ContainerSpec) -> str | None:
        """A share's MIG resource on its node, where it offers one that fits
        (and HAMi is not in use): `runtime.kubernetes.mig`."""
        node = spec.labels.get(LABEL_HOST)
        if spec.share_milli is None or not spec.gpu_uuids or not node:
            return None
        if manifests.hami_share(spec, self._options):
            return None
        with translated(f"read node {node}"):
            found = self._api.call(self._api.core.read_node, node)
            allocatable = (found.get("status") or {}).get("allocatable") or {}
            if not any(mig.profile_of(k) for k in allocatable):
                return None
            on_node = self._api.call(
                self._api.core.list_pod_for_all_namespaces,
                field_selector=f"spec.nodeName={node}",
            )
        own = manifests.kube_name(spec.name)
        others = [
            p for p in on_node.get("items") or [] if p["metadata"]["name"] != own and not _ended(p)
        ]
        chosen = mig.slice_for(
            mig.free_slices(allocatable, others), spec.share_milli, spec.share_memory_mb
        )
        return chosen.resource if chosen is not None else None

    def start(self, container_id: str) -> ContainerState:
        with translated(f"start container {container_id}"):
            namespace, name = self._located(container_id)
            record = self._record(namespace, name)
            if record is None:
                raise RuntimeFailure(f"no such container: {container_id}")
            pod = self._pod(namespace, name)
            if pod is not None and _ended(pod):  # it makes way for the new one
                self._delete_pod(namespace, name, grace_s=0)
                self._wait_gone(namespace, name, pod, REMOVAL_GRACE_S)
                pod = None
            if pod is None:
                manifest = json.loads(record["data"][manifests.MANIFEST_KEY])
                try:
                    pod = self._api.call(self._api.core.create_namespaced_pod, namespace, manifest)
                except Exists:
                    pod = self._pod(namespace, name) or manifest
            # A pod still pending (an image pull) is waited for again, not made anew.
            return self._wait_running(namespace, name, pod)

    def stop(self, container_id: str, timeout_s: int) -> ContainerState | None:
        with translated(f"stop container {container_id}"):
            located = self.locate(container_id)
            if located is None:
                return None
            namespace, name = located
            pod = self._pod(namespace, name)
            record = self._record(namespace, name)
            if pod is None:
                return None if record is None else manifests.state_of_record(record)
            self._delete_pod(namespace, name, grace_s=timeout_s)
            last = self._wait_gone(namespace, name, pod, timeout_s + REMOVAL_GRACE_S)
            ended = manifests.state_of_pod(last).finished_at
            finished = ended.strftime("%Y-%m-%dT%H:%M:%SZ") if ended else manifests.now_rfc3339()
            if record is None:
                return manifests.state_of_pod(last)
            patch = {"metadata": {"annotations": {manifests.ANNOTATION_FINISHED: finished}}}
            noted = self._api.call(
                self._api.core.patch_namespaced_config_map, name, namespace, patch
            )
        return manifests.state_of_record(noted)

    def remove(self, container_id: str) -> None:
        with translated(f"remove container {container_id}"):
            located = self.locate(container_id)
            if located is None:
                return
            namespace, name = located
            self._delete_pod(namespace, name, grace_s=0)
            with contextlib.suppress(Missing):
                self._api.call(self._api.core.delete_namespaced_config_map, name, namespace)

    def inspect(self, name_or_id: str) -> ContainerState | None:
        with translated(f"inspect container {name_or_id}"):
            located = self.locate(name_or_id)
            if located is None:
                return None
            pod = self._pod(*located)
            if pod is not None:
                return manifests.state_of_pod(pod)
            record = self._record(*located)
        return None if record is None else manifests.state_of_record(record)

    def with_labels(self, labels: dict[str, str]) -> list[ContainerState]:
        core, wanted = self._api.core, selector(labels)
        with translated("list containers"):
            records = self._api.call(core.list_config_map_for_all_namespaces, label_selector=wanted)
            pods = self._api.call(core.list_pod_for_all_namespaces, label_selector=wanted)
        states = {
            (r["metadata"]["namespace"], r["metadata"]["name"]): manifests.state_of_record(r)
            for r in records.get("items") or []
        }
        for pod in pods.get("items") or []:
            states[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = (
                manifests.state_of_pod(pod)
            )
        return [s for s in states.values() if has_labels(s.labels, labels)]

    def until_ended(self, namespace: str, name: str, timeout_s: float) -> Obj:
        """The pod once it has ended or `timeout_s` has passed; the caller removes it."""
        pod = self._pod(namespace, name)
        if pod is None:
            raise RuntimeFailure(f"pod {namespace}/{name} was deleted while it ran")
        if _ended(pod):
            return pod
        for seen in self._events(namespace, name, pod, timeout_s):
            if seen is None:
                break
            pod = seen
            if _ended(seen) or _refusal(seen) is not None:
                break
        return pod

    def hold(self, manifest: Obj, purpose: str) -> ContainerState:
        """Create the pod (a leftover of the same name goes first) and wait until
        its container runs: `RuntimeUnavailable` with the kubelet's last word
        (a failed mount, a node that does not answer) after the start timeout."""
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        with translated(f"start a pod for {purpose}"):
            left = self._pod(namespace, name)
            if left is not None:
                self._delete_pod(namespace, name, grace_s=0)
                self._wait_gone(namespace, name, left, REMOVAL_GRACE_S)
            pod = self._api.call(self._api.core.create_namespaced_pod, namespace, manifest)
            try:
                return self._wait_running(namespace, name, pod)
            except RuntimeUnavailable as exc:
                warning = self._last_warning(namespace, name)
                node = manifest["spec"].get("nodeName", "its node")
                raise RuntimeUnavailable(
                    f"{purpose} is waiting: pod {name} on {node} does not run "
                    f"({warning or exc.message})"
                ) from exc

    def _last_warning(self, namespace: str, name: str) -> str | None:
        """The latest Warning event about the pod, as `reason: message`."""
        try:
            found = self._api.call(
                self._api.core.list_namespaced_event,
                namespace,
                field_selector=f"involvedObject.name={name}",
            )
        except ApiException:
            return None
        warnings = [e for e in found.get("items") or [] if e.get("type") == "Warning"]
        if not warnings:
            return None
        last = max(warnings, key=lambda e: str(e.get("lastTimestamp") or ""))
        return f"{last.get('reason')}: {last.get('message', '')}".rstrip(": ")

    def remove_pod(self, namespace: str, name: str) -> None:
        self._delete_pod(namespace, name, grace_s=0)

    # -- helpers -----------------------------------------------------------
    def _located(self, container_id: str) -> tuple[str, str]:
        located = self.locate(container_id)
        if located is None:
            raise RuntimeFailure(f"no such container: {container_id}")
        return located

    def _delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        with contextlib.suppress(Missing):
            self._api.call(
                self._api.core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace_s,
            )

    def _events(
        self, namespace: str, name: str, since: Obj, timeout_s: float
    ) -> Iterator[Obj | None]:
        """The pod as it changes (None once deleted), from the version `since`
        was read at, until `timeout_s` passes; a too-old version reads it afresh."""
        deadline = time.monotonic() + timeout_s
        version = str((since.get("metadata") or {}).get("resourceVersion") or "")
        while (left := deadline - time.monotonic()) > 0:
            try:
                for kind, obj in self._api.watch(
                    self._api.core.list_namespaced_pod,
                    namespace,
                    field_selector=f"metadata.name={name}",
                    resource_version=version,
                    timeout_s=left,
                ):
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    yield None if kind == "DELETED" else obj
                    if time.monotonic() > deadline:
                        return
            except ApiException as exc:
                if not expired(exc):
                    raise
                current = self._pod(namespace, name)
                yield current
                version = str((current or {}).get("metadata", {}).get("resourceVersion") or "")

    def _wait_gone(self, namespace: str, name: str, pod: Obj, timeout_s: float) -> Obj:
        """The pod's last state once it has gone; `RuntimeUnavailable` if it is
        still terminating after `timeout_s` (the caller's next pass retries)."""
        last = pod
        if self._pod(namespace, name) is None:
            return last
        for seen in self._events(namespace, name, pod, timeout_s):
            if seen is None:
                return last
            last = seen
        raise RuntimeUnavailable(f"pod {namespace}/{name} is still terminating")

    def _wait_running(self, namespace: str, name: str, pod: Obj) -> ContainerState:
        if manifests.state_of_pod(pod).running:
            return manifests.state_of_pod(pod)
        reason = "Pending"
        for seen in self._events(namespace, name, pod, self._start_timeout_s):
            if seen is None:
                raise RuntimeFailure(f"pod {namespace}/{name} was deleted while starting")
            state = manifests.state_of_pod(seen)
            if state.running or state.status == "exited":  # a job may end at once
                return state
            refused = _refusal(seen)
            if refused is not None:
                raise RuntimeFailure(f"pod {namespace}/{name} did not start: {refused}")
            reason = _waiting_reason(seen) or reason
        raise RuntimeUnavailable(
            f"pod {namespace}/{name} is not running after {self._start_timeout_s:g} s ({reason})"
        )


def _ended(pod: Obj) -> bool:
    """It will not run again: its container ended, the kubelet refused it, or it is going."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))


def _same_placement(found: Obj, wanted: Obj) -> bool:
    def placement(pod: Obj) -> tuple[str, str]:
        labels = manifests.gpudock_labels(pod["metadata"])
        return str(pod["spec"].get("nodeName", "")), labels.get(LABEL_GPUS, "")

    return placement(found) == placement(wanted)


def _waiting_reason(pod: Obj) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return None


def _refusal(pod: Obj) -> str | None:
    """Why the pod will not run, or None while it may still."""
    status = pod.get("status") or {}
    for init in status.get("initContainerStatuses") or []:  # the home's seeding
        ended = (init.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode"):
            said = f"init container {init.get('name')} exited {ended['exitCode']}"
            return f"{said}: {ended.get('message', '')}".rstrip(": ")
    if status.get("phase") in ("Failed", "Succeeded"):  # refused before any container ran
        return f"{status.get('reason', status['phase'])}: {status.get('message', '')}".rstrip(": ")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return None
