"""The optional home on Kubernetes (`GPUDOCK_KUBERNETES_HOME=true`): /root
survives a stop, as the system disk does on Docker.

A claim made while the option is on holds two directories, `home` (mounted
at /root) and `data` (mounted at /root/data), and says so in its annotation
`gpudock.layout: home`; a claim made without it is the data directory itself
and is mounted as before, whatever the option says later. The layout is the
claim's, so a copy (a move to another node) carries it to the new claim.

Why one claim and not a second one for /root: a move, a copy, the size (the
instance's disk) and the deletion of an instance stay what they are, with one
claim to attach; the price is that what a user keeps in /root counts against
the instance's disk.

The first start seeds `home` from the image's /root (its dotfiles, whatever
the image installed there) in an init container of the same image and the
same hardening: copied to `home.new`, then renamed, so a start cut short
seeds again and never leaves half a home. The image needs `sh`, `cp`, `mv`.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
LAYOUT_ANNOTATION = "gpudock.layout"
HOME_LAYOUT = "home"
HOME_DIR, DATA_DIR = "home", "data"
SEED_CONTAINER = "seed-home"
CLAIM_MOUNT = "/gpudock-claim"
SEED_SCRIPT = (
    f"cd {CLAIM_MOUNT} && if [ ! -d {HOME_DIR} ]; then rm -rf {HOME_DIR}.new && "
    f"mkdir {HOME_DIR}.new && cp -a /root/. {HOME_DIR}.new/ && mv {HOME_DIR}.new {HOME_DIR}; fi"
)


def has_home(claim: Obj | None) -> bool:
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(LAYOUT_ANNOTATION) == HOME_LAYOUT


def with_home(pod: Obj, claim_volume: str = "data") -> Obj:
    """The pod with /root and the data directory mounted from their parts of
    the claim, and the init container that seeds the home the first time."""
    made = copy.deepcopy(pod)
    spec = made["spec"]
    main = spec["containers"][0]
    mounts = main["volumeMounts"]
    data_mount = next(m for m in mounts if m["name"] == claim_volume)
    data_mount["subPath"] = DATA_DIR
    # /root first: the data directory is mounted over its part of it.
    mounts.insert(0, {"name": claim_volume, "mountPath": "/root", "subPath": HOME_DIR})
    compute = {k: v for k, v in main["resources"]["limits"].items() if k in ("cpu", "memory")}
    spec["initContainers"] = [
        {
            "name": SEED_CONTAINER,
            "image": main["image"],
            "imagePullPolicy": main["imagePullPolicy"],
            "command": ["/bin/sh", "-c", SEED_SCRIPT],
            # As much as the main container asks: the pod's QoS stays Guaranteed.
            "resources": {"requests": dict(compute), "limits": compute},
            "securityContext": copy.deepcopy(main["securityContext"]),
            "volumeMounts": [{"name": claim_volume, "mountPath": CLAIM_MOUNT}],
        }
    ]
    return made
