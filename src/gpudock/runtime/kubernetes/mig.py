"""A share as a MIG slice, where the placed node offers MIG devices and HAMi
is not the operator's choice.

NVIDIA's device plugin with the `mixed` MIG strategy offers each profile as
an extended resource of its own, `nvidia.com/mig-<g>g.<m>gb` (`1g.10gb`,
`3g.40gb`, the media-extension `1g.10gb+me`, …). A share asks for the smallest
slice that holds it: at least its fraction of the card's compute (`<g>` of 7
slices) and at least its memory, among the profiles the node still has free
(its allocatable less what its other pods ask for). Hardware isolates it: no
hook library is needed for the limit.

What gpudock's placement does not model: the node's MIG geometry. It counts
a share against one of the node's GPU slots as on any node; if the slice it
was given here runs out, the kubelet refuses the pod (`OutOfnvidia.com/mig-…`)
and the instance waits with that reason. The `single` strategy (every GPU of
a node cut alike and offered as `nvidia.com/gpu`) needs nothing of this: a
share there holds one slice as a whole GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "nvidia.com/mig-"
SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100, H200)
_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


@dataclass(frozen=True, order=True)
class Profile:
    slices: int
    memory_gb: int
    name: str

    @property
    def resource(self) -> str:
        return PREFIX + self.name


def profile_of(resource: str) -> Profile | None:
    """The MIG profile an extended resource names, or None."""
    if not resource.startswith(PREFIX):
        return None
    name = resource.removeprefix(PREFIX)
    found = _PROFILE.match(name)
    if found is None:
        return None
    return Profile(int(found.group(1)), int(found.group(2)), name)


def free_slices(
    allocatable: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> dict[str, int]:
    """Each MIG resource of a node and how many of it its other pods leave."""
    free = {k: int(str(v)) for k, v in allocatable.items() if profile_of(k) is not None}
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            for name in free.keys() & limits.keys():
                free[name] -= int(str(limits[name]))
    return free


def slice_for(free: Mapping[str, int], share_milli: int, memory_mb: int) -> Profile | None:
    """The smallest free profile with the share's compute and memory, or None."""
    wanted_slices = max(1, math.ceil(share_milli * SLICES / 1000 - 1e-9))
    fitting = [
        p
        for p in (profile_of(name) for name, left in free.items() if left > 0)
        if p is not None and p.slices >= wanted_slices and p.memory_gb * 1024 >= memory_mb
    ]
    return min(fitting, default=None)
