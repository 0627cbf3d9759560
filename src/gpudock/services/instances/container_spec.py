"""How an instance maps onto runtime objects: names, labels, the container spec."""

from __future__ import annotations

import json
from typing import Protocol

from gpudock.db.models import HostModel, InstanceModel
from gpudock.runtime.base import (
    LABEL_BUILD,
    LABEL_CLUSTER,
    LABEL_GPUS,
    LABEL_HOST,
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_OWNER,
    ContainerSpec,
    ContainerState,
    Runtime,
)
from gpudock.runtime.calls import InstanceScope
from gpudock.services.context import ServiceContext
from gpudock.services.instances import published, sizing
from gpudock.services.instances.actions import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES
from gpudock.settings import Settings

DATA_MOUNT = "/root/data"


def runtime_of(ctx: ServiceContext, instance: InstanceModel, host_id: str | None = None) -> Runtime:
    """The runtime of `host_id`, by default the host the instance is (or was
    last) placed on, each call carrying the instance's placement generation
    (an agent refuses older ones)."""
    scope = InstanceScope(instance=instance.id, generation=instance.placement_generation)
    return ctx.runtime_for(host_id or instance.host_id, scope)


def container_name(cluster_id: str, instance_id: str) -> str:
    return f"gpudock-{cluster_id}-{instance_id}"


def volume_name(cluster_id: str, instance_id: str) -> str:
    return f"gpudock-{cluster_id}-{instance_id}-data"


def network_name(cluster_id: str, user_id: str) -> str:
    """Each tenant's containers share a bridge of their own, apart from everyone else's."""
    return f"gpudock-{cluster_id}-u-{user_id}"


def network_labels(cluster_id: str, user_id: str) -> dict[str, str]:
    return {**cluster_labels(cluster_id), LABEL_OWNER: user_id}


class DataVolumeOwner(Protocol):
    """What naming an instance's data volume reads: its row, or those columns alone."""

    @property
    def id(self) -> str: ...
    @property
    def data_volume(self) -> str | None: ...
    @property
    def data_host_id(self) -> str | None: ...


def data_volume_of(cluster_id: str, instance: DataVolumeOwner) -> str:
    """The instance's data volume now: it gets a new name when it moves host."""
    return instance.data_volume or volume_name(cluster_id, instance.id)


def system_image_repository(cluster_id: str, instance_id: str) -> str:
    return f"gpudock-sys/{cluster_id}-{instance_id}"


def cluster_labels(cluster_id: str) -> dict[str, str]:
    return {LABEL_MANAGED: "true", LABEL_CLUSTER: cluster_id}


def instance_containers(cluster_id: str, runtime: Runtime) -> dict[str, ContainerState]:
    """This installation's instance containers on `runtime`, by instance id (one
    labelled with an instance but not named as its container is not one)."""
    return {
        owner: container
        for container in runtime.list_containers(cluster_labels(cluster_id))
        if (owner := container.labels.get(LABEL_INSTANCE)) is not None
        and container.name == container_name(cluster_id, owner)
    }


def instance_labels(cluster_id: str, instance: InstanceModel) -> dict[str, str]:
    return {
        **cluster_labels(cluster_id),
        LABEL_INSTANCE: instance.id,
        LABEL_OWNER: instance.user_id,
        # Images gpudock built before their build labels were emptied pass them
        # on; an instance's container is no build step's.
        LABEL_BUILD: "",
    }


def user_env(instance: InstanceModel) -> dict[str, str]:
    """The user's variables, minus anything that could reach GPUs or host hooks
    (checked at the API too; stripped here again in case a row predates that)."""
    env: dict[str, str] = json.loads(instance.env or "{}")
    return {
        k: v
        for k, v in env.items()
        if k not in RESERVED_ENV_NAMES and not k.startswith(RESERVED_ENV_PREFIXES)
    }


SHARE_HOOK_PATH = "/usr/local/lib/gpudock/libvgpu.so"
LD_SO_PRELOAD = "/etc/ld.so.preload"


def share_env(settings: Settings, milli: int, gpu_memory_mb: int) -> dict[str, str]:
    """What a share's workload is told of its limits. With HAMi-core configured
    (`GPUDOCK_SHARE_HOOK_LIBRARY`) the CUDA_DEVICE_* limits are enforced in
    every process; without it they are only advertised, and the allocator is
    set up to return memory (the watchdog holds the line)."""
    limit_mib = sizing.share_memory_mb(gpu_memory_mb, milli)
    env = {
        "GPUDOCK_GPU_SHARE": f"{milli / 1000:.3f}",
        "GPUDOCK_GPU_MEMORY_LIMIT": f"{limit_mib}m",
    }
    if settings.share_hook_library is not None:
        env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{limit_mib}m"
        env["CUDA_DEVICE_SM_LIMIT"] = str(max(1, milli // 10))
    else:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,garbage_collection_threshold:0.8"
    return env


def service_env(settings: Settings, instance: InstanceModel) -> dict[str, str]:
    """What JupyterLab and TensorBoard need to sit behind the proxy: the token it
    presents and the URL prefix (see `published`)."""
    if instance.service_token is None:
        return {}
    return {
        "GPUDOCK_SERVICE_TOKEN": instance.service_token,
        "GPUDOCK_SERVICE_PREFIX": published.url_prefix(settings, instance.id),
    }


def build_spec(
    settings: Settings,
    cluster_id: str,
    instance: InstanceModel,
    host: HostModel,
    gpu_uuids: list[str],
    gpu_memory_mb: int = 0,
) -> ContainerSpec:
    """`gpu_memory_mb`: the card's memory, for a share's limits."""
    gpus = ",".join(gpu_uuids)
    share = instance.gpu_share_milli
    env = {
        **user_env(instance),
        **(share_env(settings, share, gpu_memory_mb) if share is not None else {}),
        "GPUDOCK_INSTANCE_ID": instance.id,
        "GPUDOCK_INSTANCE_NAME": instance.name,
        "GPUDOCK_GPUS": gpus,
        # 'void' hides every GPU from the NVIDIA runtime in no-GPU mode, and
        # overrides images that set NVIDIA_VISIBLE_DEVICES=all themselves.
        "NVIDIA_VISIBLE_DEVICES": gpus or "void",
        # Empty values override an image's ENV LD_PRELOAD / LD_AUDIT.
        "LD_PRELOAD": "",
        "LD_AUDIT": "",
        **service_env(settings, instance),
    }
    return ContainerSpec(
        name=container_name(cluster_id, instance.id),
        hostname=instance.name,
        image=instance.system_image,
        labels={
            **instance_labels(cluster_id, instance),
            LABEL_HOST: host.name,
            LABEL_GPUS: gpus,
        },
        env=env,
        gpu_uuids=tuple(gpu_uuids),
        real_gpus=not host.simulated,
        cpus=instance.cpu,
        memory_mb=instance.memory_gb * 1024,
        pids_limit=settings.pids_limit,
        volume_name=data_volume_of(cluster_id, instance),
        volume_mount=DATA_MOUNT,
        stop_timeout_s=settings.stop_timeout_s,
        # 'watchdog' measures instead of asking the engine to cap (see system_disks).
        system_disk_gb=(instance.system_disk_gb or settings.system_disk_gb)
        if settings.system_disk_enforce == "auto"
        else None,
        network=network_name(cluster_id, instance.user_id),
        network_labels=network_labels(cluster_id, instance.user_id),
        command=instance.command,
        share_milli=share,
        share_memory_mb=sizing.share_memory_mb(gpu_memory_mb, share) if share is not None else 0,
    )
