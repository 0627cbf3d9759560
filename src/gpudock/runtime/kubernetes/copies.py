"""Data moves on Kubernetes (`copy_volume`): a helper pod of the instance's
image mounts both claims, the source read-only, and mirrors one into the
other (`cp -a` into an empty target, `rsync` when the image has it, else a
fresh copy), as the Docker runtime's helper container does. It reports the
bytes it copied in its termination message. Both claims must be able to
attach to one node: ReadWriteOnce claims bound to local volumes on two
different nodes cannot be copied this way."""

from __future__ import annotations

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import ALLOWED_CAPABILITIES, RuntimeTimeout
from gpudock.runtime.kubernetes import manifests
from gpudock.runtime.kubernetes.api import Obj

MESSAGE_PATH = "/tmp/gpudock-copied"  # noqa: S108 (inside the helper pod)
COPY_SCRIPT = r"""
set -e
if [ -z "$(find /to -mindepth 1 -maxdepth 1 ! -name lost+found -print -quit)" ]; then
  cp -a /from/. /to/
elif command -v rsync >/dev/null 2>&1; then
  rsync -a --delete --inplace --exclude=/lost+found /from/ /to/
else
  find /to -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} +
  cp -a /from/. /to/
fi
du -sb /from | cut -f1 > "$1"
"""


def helper_pod(
    helper_name: str,
    labels: dict[str, str],
    image: str,
    source: str,
    target: str,
    node: str | None = None,
) -> Obj:
    container = {
        "name": "copy",
        "image": image,
        "command": ["sh", "-c", COPY_SCRIPT, "copy", MESSAGE_PATH],
        "terminationMessagePath": MESSAGE_PATH,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(ALLOWED_CAPABILITIES)},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "from", "mountPath": "/from", "readOnly": True},
            {"name": "to", "mountPath": "/to"},
        ],
    }
    spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            {"name": "from", "persistentVolumeClaim": {"claimName": manifests.kube_name(source)}},
            {"name": "to", "persistentVolumeClaim": {"claimName": manifests.kube_name(target)}},
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": manifests.metadata(helper_name, labels, manifests.tenant_namespace(labels)),
        "spec": spec,
    }


def holder_pod(
    name: str, labels: dict[str, str], image: str, claim: str, mount: str, node: str
) -> Obj:
    """A pod on `node` that only holds `claim` mounted at `mount` (read-only at
    /from), for a copy streamed between two nodes (`runtime.kubernetes.streaming`)."""
    made = helper_pod(name, labels, image, claim, claim, node)
    spec = made["spec"]
    spec["volumes"] = [spec["volumes"][0]]
    container = spec["containers"][0]
    container["command"] = ["sleep", "infinity"]
    container.pop("terminationMessagePath")
    container["volumeMounts"] = [
        {"name": "from", "mountPath": mount, **({"readOnly": True} if mount == "/from" else {})}
    ]
    return made


def copied_bytes(pod: Obj, helper_name: str, timeout_s: float) -> int:
    """What the ended helper reported; `RuntimeFailure` if it failed."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    ended = (statuses[0].get("state") or {}).get("terminated")
    if ended is None:
        raise RuntimeTimeout(f"copy helper {helper_name} did not end within {timeout_s:g} s")
    if ended.get("exitCode") != 0:
        raise RuntimeFailure(
            f"copy helper {helper_name} failed (exit code {ended.get('exitCode')}): "
            f"{ended.get('message', '')}"
        )
    try:
        return int(str(ended.get("message", "0")).strip() or 0)
    except ValueError:
        return 0
