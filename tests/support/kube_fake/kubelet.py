"""The fake cluster's kubelet: every pod bound to one of the fake's nodes runs
as a real container on the local Docker Engine, and the pod's status follows
that container, as a kubelet's pod lifecycle event generator relists its
runtime (every `RELIST_S`, and at once on any change to the store).

Modelled: the image (never pulled: `ErrImageNeverPull` if the engine lacks
it), command and args (ENTRYPOINT and CMD), env values, hostname, CPU and
memory limits, the security context (privileged, capabilities,
allowPrivilegeEscalation as no-new-privileges, seccomp), a PVC as a Docker
volume named after the claim (kept when the pod goes, removed with the claim),
a memory-backed emptyDir as a tmpfs, admission of extended resources
(`nvidia.com/gpu`) against the node's allocatable, graceful deletion (SIGTERM,
SIGKILL after the grace period, then the pod is removed), restartPolicy
Always (restarted in place; no back-off) and Never (Succeeded or Failed).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import shutil
import tarfile
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors

from tests.support.kube_fake.containers import (
    LABEL_FAKE,
    LABEL_POD,
    ContainerArguments,
    quantity,
    volume_of_claim,
)
from tests.support.kube_fake.statuses import ApiError
from tests.support.kube_fake.store import Obj, Store, by_kind, now_rfc3339

RELIST_S = 0.5
SELECTED_NODE = "volume.kubernetes.io/selected-node"  # a claim's node, once bound
LABEL_INIT = "kfake.init"  # an init container's: the pod's uid
INIT_TIMEOUT_S = 120
log = logging.getLogger(__name__)

PODS, NODES, CLAIMS, EVENTS = (
    by_kind(k) for k in ("Pod", "Node", "PersistentVolumeClaim", "Event")
)


class DockerKubelet:
    def __init__(
        self, store: Store, api: docker.APIClient, cluster: str, *, local_volumes: bool = False
    ) -> None:
        """`local_volumes`: a claim is node-local storage (as local-path or a
        local PV): bound to the node of the first pod that mounts it, and a pod
        on another node cannot mount it (it waits, `FailedMount`)."""
        self.store, self.api, self.cluster = store, api, cluster
        self.local_volumes = local_volumes
        self._stuck: set[str] = set()  # pods whose claims are on other nodes
        self._stop = threading.Event()
        self._busy: set[str] = set()  # pod uids with a slow step (create, stop) under way
        self._messages: dict[str, str] = {}  # container id → its termination message
        self._lock = threading.Lock()
        self._workers = concurrent.futures.ThreadPoolExecutor(8, "kfake-kubelet")
        self._thread = threading.Thread(target=self._loop, name="kfake-kubelet", daemon=True)
        self._containers = ContainerArguments(store, api, cluster)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self._thread.join(timeout=30)
        self._workers.shutdown(wait=True)

    def remove_everything(self) -> None:
        """Remove every container and claim volume this fake cluster made."""
        for summary in self.api.containers(
            all=True, filters={"label": f"{LABEL_FAKE}={self.cluster}"}
        ):
            self.api.remove_container(summary["Id"], force=True)
        for volume in (
            self.api.volumes(filters={"label": f"{LABEL_FAKE}={self.cluster}"}).get("Volumes") or []
        ):
            self.api.remove_volume(volume["Name"], force=True)
        shutil.rmtree(Path(tempfile.gettempdir()) / f"kfake-{self.cluster}", ignore_errors=True)

    # -- the loop ----------------------------------------------------------
    def _loop(self) -> None:
        seen = [0]
        while not self._stop.is_set():
            with self.store.changed:
                self.store.changed.wait_for(
                    lambda: self._stop.is_set() or self.store.revision != seen[0], timeout=RELIST_S
                )
            seen[0] = self.store.revision
            try:
                self._sync()
            except Exception:  # the fake's own bug: say so, keep the loop
                log.exception("fake kubelet: sync failed")

    def _sync(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.store.list(NODES, None, lambda o: True)[0]}
        pods, _ = self.store.list(PODS, None, lambda o: True)
        containers = {
            c["Labels"][LABEL_POD]: c
            for c in self.api.containers(
                all=True, filters={"label": f"{LABEL_FAKE}={self.cluster}"}
            )
            if LABEL_POD in c["Labels"]  # not an init container's
        }
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if (pod.get("spec") or {}).get("nodeName") not in nodes or uid in self._busy:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._in_background(uid, self._terminate, pod, containers.get(uid))
            elif (
                uid not in containers
                and pod["status"].get("phase") == "Pending"
                and uid not in self._stuck
            ):
                self._in_background(uid, self._run, pod)
            elif uid in containers:
                self._follow(pod, containers[uid])
        alive = {p["metadata"]["uid"] for p in pods}
        for uid, summary in containers.items():
            if uid not in alive and uid not in self._busy:
                self._in_background(uid, self._remove_container, summary["Id"])
        self._remove_volumes_of_deleted_claims()
        self.store.finalize_namespaces()

    def _in_background(self, uid: str, step: Any, *args: Any) -> None:
        with self._lock:
            if uid in self._busy:
                return
            self._busy.add(uid)

        def run() -> None:
            try:
                step(*args)
            except Exception:
                log.exception("fake kubelet: %s failed", step.__name__)
            finally:
                with self._lock:
                    self._busy.discard(uid)
                with self.store.changed:
                    self.store.changed.notify_all()

        self._workers.submit(run)

    # -- steps -------------------------------------------------------------
    def _run(self, pod: Obj) -> None:
        refused = self._admission(pod)
        if refused is not None:
            reason, message = refused
            self._set_status(pod, {"phase": "Failed", "reason": reason, "message": message})
            self._event(pod, "Warning", reason, message)
            return
        container = pod["spec"]["containers"][0]
        try:
            self.api.inspect_image(container["image"])
        except docker.errors.ImageNotFound:
            message = (
                f'Container image "{container["image"]}" is not present with pull policy of Never'
            )
            waiting = {"waiting": {"reason": "ErrImageNeverPull", "message": message}}
            self._set_status(
                pod, {"containerStatuses": [self._container_status(container, waiting)]}
            )
            self._event(pod, "Warning", "ErrImageNeverPull", message)
            return
        if self.local_volumes and not self._claims_mountable(pod):
            return
        if not self._initialised(pod):
            return
        try:
            created = self.api.create_container(**self._containers.arguments(pod, container))
            self.api.start(created["Id"])
        except docker.errors.APIError as exc:
            message = str(exc.explanation or exc)
            waiting = {"waiting": {"reason": "CreateContainerError", "message": message}}
            self._set_status(
                pod, {"containerStatuses": [self._container_status(container, waiting)]}
            )
            self._event(pod, "Warning", "Failed", message)
            return
        self._event(pod, "Normal", "Started", f"Started container {container['name']}")
        self._follow(pod, {"Id": created["Id"]})

    def _claims_mountable(self, pod: Obj) -> bool:
        """Bind the pod's unbound claims to its node; False (the pod waits, as a
        real kubelet's would) if one is bound to another node."""
        meta, node = pod["metadata"], pod["spec"]["nodeName"]
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                continue
            found = self.store.get(CLAIMS, meta["namespace"], claim)
            bound = (found["metadata"].get("annotations") or {}).get(SELECTED_NODE)
            if bound is not None and bound != node:
                self._stuck.add(meta["uid"])
                message = (
                    f'MountVolume.NodeAffinity check failed for volume "{claim}" : '
                    f"no matching NodeSelectorTerms (it is on {bound})"
                )
                waiting = {"waiting": {"reason": "ContainerCreating"}}
                status = self._container_status(pod["spec"]["containers"][0], waiting)
                self._set_status(pod, {"containerStatuses": [status]})
                self._event(pod, "Warning", "FailedMount", message)
                return False
            if bound is None:

                def bind(current: Obj, on: str = node) -> Obj:
                    current["metadata"].setdefault("annotations", {})[SELECTED_NODE] = on
                    return current

                self.store.update(CLAIMS, meta["namespace"], claim, bind)
        return True

    def _initialised(self, pod: Obj) -> bool:
        """Run the pod's init containers in order, each to its end; False (the
        pod Failed, as with `restartPolicy: Never`) once one exits non-zero."""
        statuses: list[Obj] = []
        for init in pod["spec"].get("initContainers") or []:
            arguments = self._containers.arguments(pod, init)
            arguments["labels"] = {LABEL_FAKE: self.cluster, LABEL_INIT: pod["metadata"]["uid"]}
            made = self.api.create_container(**arguments)
            try:
                self.api.start(made["Id"])
                code = int(self.api.wait(made["Id"], timeout=INIT_TIMEOUT_S)["StatusCode"])
                output = bytes(self.api.logs(made["Id"], tail=5)).decode(errors="replace")
            finally:
                self.api.remove_container(made["Id"], force=True)
            ended = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "message": output.strip(),
            }
            statuses.append(self._container_status(init, {"terminated": ended}))
            self._set_status(pod, {"initContainerStatuses": statuses})
            if code != 0:
                self._set_status(pod, {"phase": "Failed"})
                self._event(pod, "Warning", "Failed", f"init container {init['name']} failed")
                return False
        return True

    def _terminate(self, pod: Obj, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            grace = int(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self._event(
                pod,
                "Normal",
                "Killing",
                f"Stopping container {pod['spec']['containers'][0]['name']}",
            )
            self.api.stop(summary["Id"], timeout=grace)
            self._follow(pod, summary)
            self.api.remove_container(summary["Id"], force=True)
        meta = pod["metadata"]
        try:
            self.store.remove(PODS, meta["namespace"], meta["name"])
        except ApiError:
            log.debug("pod %s was removed meanwhile (a forced delete)", meta["name"])

    def evict(self, pod: Obj, message: str) -> None:
        """What a kubelet does under node pressure: leave the pod Failed,
        `Evicted`, with a `DisruptionTarget` condition, and kill its container
        (the status first, so no reader sees the exit without its reason)."""
        disrupted = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        conditions = pod["status"].get("conditions") or []
        others = [c for c in conditions if c["type"] != "DisruptionTarget"]
        status = {"phase": "Failed", "reason": "Evicted", "message": message}
        self._set_status(pod, {**status, "conditions": [*others, disrupted]})
        self._event(pod, "Warning", "Evicted", message)
        uid = pod["metadata"]["uid"]
        for summary in self.api.containers(filters={"label": f"{LABEL_POD}={uid}"}):
            self.api.kill(summary["Id"])

    def _remove_container(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.api.remove_container(container_id, force=True)

    def _remove_volumes_of_deleted_claims(self) -> None:
        claims = {
            volume_of_claim(self.cluster, c["metadata"]["namespace"], c["metadata"]["name"])
            for c in self.store.list(CLAIMS, None, lambda o: True)[0]
        }
        volumes = (
            self.api.volumes(filters={"label": f"{LABEL_FAKE}={self.cluster}"}).get("Volumes") or []
        )
        in_use = {
            m.get("Name")
            for c in self.api.containers(
                all=True, filters={"label": f"{LABEL_FAKE}={self.cluster}"}
            )
            for m in c.get("Mounts") or []
        }
        for volume in volumes:
            if volume["Name"] not in claims and volume["Name"] not in in_use:
                # One still in use by a container being removed goes at the next sync.
                with contextlib.suppress(docker.errors.APIError):
                    self.api.remove_volume(volume["Name"])

    # -- what a pod becomes ------------------------------------------------
    def _admission(self, pod: Obj) -> tuple[str, str] | None:
        node = self.store.get(NODES, "", pod["spec"]["nodeName"])
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        others = [
            p
            for p in self.store.list(PODS, None, lambda o: True)[0]
            if p["spec"].get("nodeName") == pod["spec"]["nodeName"]
            and p["metadata"]["uid"] != pod["metadata"]["uid"]
            and p["status"].get("phase") in ("Running", "Pending")
            and p["status"].get("containerStatuses")
        ]
        for name, wanted in _extended_requests(pod).items():
            used = sum(_extended_requests(p).get(name, 0) for p in others)
            have = quantity(allocatable.get(name, 0))
            if used + wanted > have:
                return (
                    f"OutOf{name}",
                    f"Pod was rejected: Node didn't have enough resource: {name}, "
                    f"requested: {wanted:g}, used: {used:g}, capacity: {have:g}",
                )
        return None

    # -- status --------------------------------------------------------------
    def _follow(self, pod: Obj, summary: dict[str, Any]) -> None:
        try:
            attrs = self.api.inspect_container(summary["Id"])
        except docker.errors.NotFound:
            return
        state = attrs["State"]
        container = pod["spec"]["containers"][0]
        policy = pod["spec"].get("restartPolicy", "Always")
        if (
            not state["Running"]
            and policy == "Always"
            and not pod["metadata"].get("deletionTimestamp")
        ):
            self.api.start(attrs["Id"])  # restarted in place (a real kubelet backs off)
            attrs = self.api.inspect_container(attrs["Id"])
            state = attrs["State"]
        if state["Running"]:
            current = {"running": {"startedAt": state["StartedAt"][:19] + "Z"}}
            phase = "Running"
        else:
            code = int(state.get("ExitCode") or 0)
            current = {
                "terminated": {
                    "exitCode": code,
                    "reason": "OOMKilled"
                    if state.get("OOMKilled")
                    else ("Completed" if code == 0 else "Error"),
                    "startedAt": state["StartedAt"][:19] + "Z",
                    "finishedAt": state["FinishedAt"][:19] + "Z",
                    "containerID": f"docker://{attrs['Id']}",
                    "message": self._termination_message(attrs["Id"], container),
                }
            }
            phase = "Succeeded" if code == 0 else "Failed"
        ready = "True" if state["Running"] else "False"
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = next((n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), "")
        restarts = int(attrs.get("RestartCount") or 0)
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": ip,
            "podIPs": [{"ip": ip}] if ip else [],
            "startTime": pod["status"].get("startTime") or now_rfc3339(),
            "conditions": _conditions(pod, ready),
            "containerStatuses": [
                {
                    **self._container_status(container, current),
                    "containerID": f"docker://{attrs['Id']}",
                    "imageID": f"docker-pullable://{attrs['Image']}",
                    "ready": state["Running"],
                    "started": state["Running"],
                    "restartCount": restarts,
                }
            ],
        }
        self._set_status(pod, status)

    def _termination_message(self, container_id: str, container: Obj) -> str:
        """The file at the container's terminationMessagePath, read once it ended."""
        if container_id not in self._messages:
            path = container.get("terminationMessagePath", "/dev/termination-log")
            try:
                chunks, _ = self.api.get_archive(container_id, path)
                with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
                    member = archive.extractfile(archive.getmembers()[0])
                    text = member.read().decode() if member else ""
            except (docker.errors.APIError, tarfile.TarError, IndexError):
                text = ""
            self._messages[container_id] = text
        return self._messages[container_id]

    def _container_status(self, container: Obj, state: Obj) -> Obj:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": state,
        }

    def _set_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]

        def change(current: Obj) -> Obj:
            current["status"] = {**current.get("status", {}), **status}
            return current

        try:
            self.store.update(PODS, meta["namespace"], meta["name"], change)
        except ApiError:
            log.debug("pod %s went before its status was written", meta["name"])

    def _event(self, pod: Obj, kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        stamp = now_rfc3339()
        event = {
            "metadata": {"name": f"{meta['name']}.{datetime.now(UTC).strftime('%H%M%S%f')}"},
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.store.create(EVENTS, meta["namespace"], event)
        except ApiError:
            log.debug("no event for pod %s: its namespace is going", meta["name"])


def _conditions(pod: Obj, ready: str) -> list[Obj]:
    """The pod's conditions, each keeping its transition time while its status holds."""
    before = {c["type"]: c for c in pod["status"].get("conditions") or []}
    kept = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    conditions = [c for c in before.values() if c["type"] not in kept]  # DisruptionTarget
    for kind in kept:
        status = "True" if kind in ("PodScheduled", "Initialized") else ready
        old = before.get(kind)
        since = old["lastTransitionTime"] if old and old["status"] == status else now_rfc3339()
        conditions.append(
            {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        )
    return conditions


def _extended_requests(pod: Obj) -> dict[str, float]:
    wanted: dict[str, float] = {}
    for container in pod["spec"].get("containers", []):
        limits = (container.get("resources") or {}).get("limits") or {}
        for name, value in limits.items():
            if "/" in name:
                wanted[name] = wanted.get(name, 0) + quantity(value)
    return wanted
