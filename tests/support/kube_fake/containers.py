"""What a pod's container becomes on the Docker Engine: its image, command,
environment, limits, security context and mounts (a claim as a Docker volume,
or a directory of one for a `subPath`; a ConfigMap key as a read-only file; a
memory `emptyDir` as a tmpfs)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import docker

from tests.support.kube_fake.store import Obj, Store, by_kind

LABEL_FAKE = "kfake.cluster"
LABEL_POD = "kfake.pod"
CLAIMS = by_kind("PersistentVolumeClaim")
CONFIG_MAPS = by_kind("ConfigMap")


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ('500m', '2', '8Gi', '1G') as a number."""
    text = str(text)
    suffixes = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "m": 1e-3,
    }
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def volume_of_claim(cluster: str, namespace: str, claim: str) -> str:
    return f"kfake-{cluster}-{namespace}-{claim}"


class ContainerArguments:
    def __init__(self, store: Store, api: docker.APIClient, cluster: str) -> None:
        self.store, self.api, self.cluster = store, api, cluster
        self._cpus = int(api.info().get("NCPU", 1))

    def arguments(self, pod: Obj, container: Obj) -> dict[str, Any]:
        spec, meta = pod["spec"], pod["metadata"]
        limits = (container.get("resources") or {}).get("limits") or {}
        security = container.get("securityContext") or {}
        capabilities = security.get("capabilities") or {}
        binds: dict[str, dict[str, str]] = {}
        tmpfs: dict[str, str] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                self.store.get(CLAIMS, meta["namespace"], claim)  # a missing claim: no start
                name = volume_of_claim(self.cluster, meta["namespace"], claim)
                self.api.create_volume(name, labels={LABEL_FAKE: self.cluster})
                if mount.get("subPath"):  # the engine is local: a directory of the volume
                    sub_path = Path(self.api.inspect_volume(name)["Mountpoint"], mount["subPath"])
                    sub_path.mkdir(parents=True, exist_ok=True)
                    name = str(sub_path)
                binds[name] = {
                    "bind": mount["mountPath"],
                    "mode": "ro" if mount.get("readOnly") else "rw",
                }
            elif "configMap" in volume:
                source = self._config_map_file(meta, volume, mount)
                binds[source] = {"bind": mount["mountPath"], "mode": "ro"}
            elif (volume.get("emptyDir") or {}).get("medium") == "Memory":
                size = volume["emptyDir"].get("sizeLimit")
                tmpfs[mount["mountPath"]] = f"size={int(quantity(size))}" if size else ""
        security_opt = []
        if security.get("allowPrivilegeEscalation") is False:
            security_opt.append("no-new-privileges:true")
        if ((security.get("seccompProfile") or {}).get("type")) == "Unconfined":
            security_opt.append("seccomp=unconfined")
        host_config = self.api.create_host_config(
            privileged=bool(security.get("privileged")),
            cap_drop=capabilities.get("drop") or None,
            cap_add=capabilities.get("add") or None,
            security_opt=security_opt or None,
            binds=binds or None,
            tmpfs=tmpfs or None,
            # The engine refuses more CPUs than it has: one machine plays every node.
            nano_cpus=int(min(quantity(limits["cpu"]), self._cpus) * 1e9)
            if "cpu" in limits
            else None,
            mem_limit=int(quantity(limits["memory"])) if "memory" in limits else None,
        )
        return {
            "image": container["image"],
            "entrypoint": container.get("command"),
            "command": container.get("args"),
            "environment": {e["name"]: e.get("value", "") for e in container.get("env") or []},
            "hostname": spec.get("hostname") or meta["name"][:63],
            # With the pod's uid, as a kubelet names them: a pod made again under the same
            # name must not meet the old one's container that is still being removed.
            "name": f"kfake-{self.cluster}-{meta['namespace']}-{meta['name']}-{container['name']}"
            f"-{meta['uid'][:8]}",
            "labels": {LABEL_FAKE: self.cluster, LABEL_POD: meta["uid"]},
            "host_config": host_config,
            "detach": True,
        }

    def _config_map_file(self, meta: Obj, volume: Obj, mount: Obj) -> str:
        """The config map's key `mount.subPath` names, as a file on this host
        (the engine is local) for a read-only bind mount."""
        config_map = self.store.get(CONFIG_MAPS, meta["namespace"], volume["configMap"]["name"])
        paths = {i["path"]: i["key"] for i in volume["configMap"].get("items") or []}
        key = paths.get(mount.get("subPath", ""), mount.get("subPath", ""))
        directory = Path(tempfile.gettempdir()) / f"kfake-{self.cluster}" / meta["uid"]
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / key
        target.write_text((config_map.get("data") or {}).get(key, ""))
        target.chmod(0o644)
        return str(target)
