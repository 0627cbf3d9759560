"""The fake apiserver's storage: objects by resource, namespace and name, one
`resourceVersion` counter for everything (as etcd's revision), and a bounded
history of changes that watches replay from a resourceVersion; one older than
the history is answered 410 Gone, as a compacted etcd makes a real one answer.

Thread-safe: the HTTP handlers, the kubelet and the tests share one store.
Changes notify `changed`, on which watchers and the kubelet wait (with deadlines).
"""

from __future__ import annotations

import copy
import random
import string
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.support.kube_fake.selectors import Predicate
from tests.support.kube_fake.statuses import ApiError

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = (
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",)),
    Resource("", "v1", "nodes", "Node", False, ("no",)),
    Resource("", "v1", "pods", "Pod", True, ("po",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",)),
    Resource("", "v1", "services", "Service", True, ("svc",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
)


def resource(group: str, version: str, plural: str) -> Resource:
    for found in RESOURCES:
        if (found.group, found.version, found.plural) == (group, version, plural):
            return found
    raise ApiError(404, "NotFound", "the server could not find the requested resource")


def by_kind(kind: str) -> Resource:
    return next(r for r in RESOURCES if r.kind == kind)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    resource_version: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj


class Store:
    def __init__(self, history: int = 2000) -> None:
        self.changed = threading.Condition()
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._revision = 1
        self._history: deque[Change] = deque(maxlen=history)
        self._compacted = 1  # watches from before this revision are Gone

    # -- reading -----------------------------------------------------------
    @property
    def revision(self) -> int:
        with self.changed:
            return self._revision

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        with self.changed:
            found = self._objects.get((res.plural, namespace, name))
            if found is None:
                raise ApiError.not_found(res.plural, name, res.group)
            return copy.deepcopy(found)

    def find(self, res: Resource, namespace: str, name: str) -> Obj | None:
        try:
            return self.get(res, namespace, name)
        except ApiError:
            return None

    def list(self, res: Resource, namespace: str | None, match: Predicate) -> tuple[list[Obj], int]:
        with self.changed:
            items = [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in sorted(self._objects.items())
                if plural == res.plural and (namespace is None or ns == namespace) and match(obj)
            ]
            return items, self._revision

    def changes_since(
        self,
        res: Resource,
        revision: int,
        namespace: str | None,
        match: Predicate,
        timeout_s: float,
    ) -> tuple[list[Change], int]:
        """The changes to `res` after `revision`, waiting up to `timeout_s` for
        any change, and the revision seen; `ApiError.gone` if the history no
        longer reaches back that far."""

        def ready() -> bool:
            return revision < self._compacted - 1 or self._revision > revision

        with self.changed:
            self.changed.wait_for(ready, timeout=timeout_s)
            if revision < self._compacted - 1:
                raise ApiError.gone(revision, self._compacted)
            found = [
                c
                for c in self._history
                if c.resource_version > revision
                and c.plural == res.plural
                and (namespace is None or c.obj["metadata"].get("namespace") == namespace)
                and match(c.obj)
            ]
            return found, self._revision

    def compact(self) -> None:
        """Forget the history, as etcd's compaction does: every watch from an
        older resourceVersion gets 410 Gone."""
        with self.changed:
            self._history.clear()
            self._compacted = self._revision + 1
            self.changed.notify_all()

    # -- writing -----------------------------------------------------------
    def _record(self, res: Resource, kind: str, obj: Obj) -> None:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        self._history.append(Change(self._revision, res.plural, kind, copy.deepcopy(obj)))
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].resource_version
        self.changed.notify_all()

    def create(self, res: Resource, namespace: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = meta["generateName"] + suffix
        name = meta.get("name") or ""
        with self.changed:
            if res.namespaced and ("namespaces", "", namespace) not in self._objects:
                raise ApiError.not_found("namespaces", namespace)
            key = (res.plural, namespace, name)
            if key in self._objects:
                raise ApiError.already_exists(res.plural, name, res.group)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
            if res.namespaced:
                meta["namespace"] = namespace
            obj["kind"], obj["apiVersion"] = res.kind, res.api_version
            self._objects[key] = obj
            self._record(res, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(
        self, res: Resource, namespace: str, name: str, change: Callable[[Obj], Obj | None]
    ) -> Obj:
        """Apply `change` to (a copy of) the stored object and store the result.
        A `resourceVersion` in the result other than the stored one is a 409
        Conflict (optimistic concurrency, as the apiserver checks it)."""
        with self.changed:
            key = (res.plural, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise ApiError.not_found(res.plural, name, res.group)
            updated = change(copy.deepcopy(current)) or current
            wanted = updated.get("metadata", {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                why = (
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
                raise ApiError.conflict(res.plural, name, why, res.group)
            for kept in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
                if kept in current["metadata"]:
                    updated["metadata"][kept] = current["metadata"][kept]
            updated["kind"], updated["apiVersion"] = res.kind, res.api_version
            if updated == current:
                return copy.deepcopy(current)  # a no-op write keeps its resourceVersion
            self._objects[key] = updated
            self._record(res, "MODIFIED", updated)
            return copy.deepcopy(updated)

    def mark_deleting(self, res: Resource, namespace: str, name: str, grace_s: int) -> Obj:
        def mark(obj: Obj) -> Obj:
            meta = obj["metadata"]
            meta.setdefault("deletionTimestamp", now_rfc3339())
            meta.setdefault("deletionGracePeriodSeconds", grace_s)
            return obj

        with self.changed:
            key = (res.plural, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise ApiError.not_found(res.plural, name, res.group)
            marked = mark(copy.deepcopy(current))
            if marked != current:
                self._objects[key] = marked
                self._record(res, "MODIFIED", marked)
            return copy.deepcopy(marked)

    def remove(self, res: Resource, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self._objects.pop((res.plural, namespace, name), None)
            if obj is None:
                raise ApiError.not_found(res.plural, name, res.group)
            self._record(res, "DELETED", obj)
            return copy.deepcopy(obj)

    def namespaced_keys(self, namespace: str) -> list[tuple[str, str]]:
        with self.changed:
            return [(p, n) for (p, ns, n) in self._objects if ns == namespace]

    def finalize_namespaces(self) -> None:
        """Remove terminating namespaces that hold nothing any more (the
        namespace controller's last step)."""
        with self.changed:
            done = [
                name
                for (plural, _, name), obj in self._objects.items()
                if plural == "namespaces"
                and obj["metadata"].get("deletionTimestamp")
                and not any(ns == name for (_, ns, _) in self._objects)
            ]
        for name in done:
            self.remove(by_kind("Namespace"), "", name)
