"""Validation of what an instance asks for: GPU model and count, and sizes."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.db.models import GpuDeviceModel
from gpudock.errors import GpudockError, InvalidRequest
from gpudock.messages import Message
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.shape import FleetShape
from gpudock.settings import Settings

MILLI_PER_GPU = 1000


def share_text(milli: int) -> str:
    """A share in milli-GPU as the decimal fraction users write: 250 → "0.25"."""
    return str((Decimal(milli) / MILLI_PER_GPU).normalize())


def share_memory_mb(card_mb: int, milli: int) -> int:
    """A share's part of its card's memory (rounded down: never over the card)."""
    return card_mb * milli // MILLI_PER_GPU


class SizeRequest(Protocol):
    """The parts of a create request that sizing reads (`actions.InstanceRequest`)."""

    @property
    def gpu_model(self) -> str | None: ...

    @property
    def gpu_count(self) -> int: ...

    @property
    def cpu(self) -> float | None: ...

    @property
    def memory_gb(self) -> int | None: ...

    @property
    def disk_gb(self) -> int | None: ...

    @property
    def system_disk_gb(self) -> int | None: ...

    @property
    def gpu_share(self) -> Decimal | None: ...

    @property
    def gpu_memory_gb(self) -> int | None: ...

    @property
    def gpu_models(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Size:
    cpu: float
    memory_gb: int
    disk_gb: int
    system_disk_gb: int
    gpu_share_milli: int | None = None  # a share of one GPU; None: whole GPUs


@dataclass(frozen=True)
class _HostShape:
    cpus: float
    memory_gb: int
    gpus: int


def _shapes(fleet: FleetShape, model: str | None) -> tuple[_HostShape, ...]:
    """Present hosts with their count of `model`'s GPUs; those without one left
    out, unless `model` is None (every host, GPUs not counted)."""
    return fleet.derived(("host sizes", model), lambda shape: _count_shapes(shape, model))


def _count_shapes(fleet: FleetShape, model: str | None) -> tuple[_HostShape, ...]:
    shapes = []
    for host in fleet.hosts:
        count = sum(1 for gpu in host.gpus if gpu.slot.model == model)
        if model is None or count:
            shapes.append(_HostShape(host.cpus, host.memory_gb, count))
    return tuple(shapes)


def resolve_size(
    fleet: FleetShape,
    session: Session,
    settings: Settings,
    request: SizeRequest,
    cpu_ceiling: float | None = None,
) -> Size:
    """The instance's sizes (defaults filled in), or `InvalidRequest` for one
    that no host could ever hold, saying the largest that fits: hosts of any
    accepted model count. `cpu_ceiling`: the most CPUs a container can be given
    (a simulated fleet's engine), so that the CPU figure is the limit enforced."""
    size = _resolve_size(fleet, session, settings, request)
    if cpu_ceiling is not None and size.cpu > cpu_ceiling:
        return replace(size, cpu=float(cpu_ceiling))
    return size


def _resolve_size(
    fleet: FleetShape, session: Session, settings: Settings, request: SizeRequest
) -> Size:
    if request.gpu_count > 0 and request.gpu_model is None:
        raise InvalidRequest("gpu_model is required when gpu_count > 0", field="gpu_model")
    models = [m for m in dict.fromkeys((request.gpu_model, *request.gpu_models)) if m]
    for model in models:
        if not any(s.gpus for s in _shapes(fleet, model)):
            raise InvalidRequest(
                Message(
                    "unknown GPU model {model}; available: {models}",
                    model=repr(model),
                    models=", ".join(sorted(fleet.models)) or Message("none"),
                ),
                field="gpu_model",
            )
    shapes = [s for m in models for s in _shapes(fleet, m)] or list(_shapes(fleet, None))
    share = share_milli(session, request)
    if share is not None:
        return _share_size(settings, request, shapes, share)
    if not shapes:
        raise InvalidRequest("no hosts are available", field="gpu_model")
    if request.gpu_count > 0:
        largest = max(s.gpus for s in shapes)
        if request.gpu_count > largest:
            raise InvalidRequest(
                Message(
                    "gpu_count {count} is more than any host has: at most {largest} × {models} "
                    "fit on one host",
                    count=request.gpu_count,
                    largest=largest,
                    models=" or ".join(models),
                ),
                field="gpu_count",
            )
        fitting = [s for s in shapes if s.gpus >= request.gpu_count]
        # AutoDL-style default: the smallest per-GPU share of CPU and memory
        # among hosts that could take the request, times the GPU count.
        cpu = min(s.cpus / s.gpus for s in fitting) * request.gpu_count
        memory = min(s.memory_gb // s.gpus for s in fitting) * request.gpu_count
    else:
        fitting, cpu, memory = shapes, settings.no_gpu_cpu, settings.no_gpu_memory_gb
    return Size(
        cpu=_check_cpu(request.cpu, cpu, fitting),
        memory_gb=_check_memory(request.memory_gb, memory, fitting),
        disk_gb=check_disk(request.disk_gb, settings),
        system_disk_gb=_check_system_disk(request.system_disk_gb, settings),
    )


def _check_cpu(asked: float | None, default: float, shapes: list[_HostShape]) -> float:
    most = max(s.cpus for s in shapes)
    value = default if asked is None else asked
    if not (0 < value <= most) or math.isnan(value):
        raise InvalidRequest(f"cpu must be > 0 and at most {most:g} here", field="cpu")
    return round(value, 3)


def _check_memory(asked: int | None, default: int, shapes: list[_HostShape]) -> int:
    most = max(s.memory_gb for s in shapes)
    value = max(1, default) if asked is None else asked
    if not 0 < value <= most:
        raise InvalidRequest(f"memory_gb must be 1..{most} here", field="memory_gb")
    return value


def check_disk(asked: int | None, settings: Settings) -> int:
    """The data disk's size in GB (the default if not asked), or InvalidRequest."""
    value = settings.default_disk_gb if asked is None else asked
    if not 0 < value <= settings.max_disk_gb:
        raise InvalidRequest(
            Message("disk_gb must be 1..{most}", most=settings.max_disk_gb), field="disk_gb"
        )
    return value


def _check_system_disk(asked: int | None, settings: Settings) -> int:
    value = settings.system_disk_gb if asked is None else asked
    if not 0 < value <= settings.max_system_disk_gb:
        raise InvalidRequest(
            f"system_disk_gb must be 1..{settings.max_system_disk_gb}", field="system_disk_gb"
        )
    return value


def share_milli(session: Session, request: SizeRequest) -> int | None:
    """A share of one GPU in milli-GPU (rounded up: the tenant never gets less),
    from a fraction of the card or from GB of its memory; None: whole GPUs."""
    if request.gpu_share is None and request.gpu_memory_gb is None:
        return None
    if request.gpu_share is not None and request.gpu_memory_gb is not None:
        raise InvalidRequest(
            "give either gpu_share (a fraction of the card) or gpu_memory_gb, not both",
            field="gpu_share",
        )
    if request.gpu_model is None or request.gpu_count != 1:
        raise InvalidRequest(
            "a share is of one GPU: give gpu_model and gpu_count 1 (or leave it out); "
            "for several GPUs ask for whole ones with gpu_count and no share",
            field="gpu_count",
        )
    if request.gpu_share is not None:
        return _fraction_milli(request.gpu_share)
    assert request.gpu_memory_gb is not None
    models = (request.gpu_model, *request.gpu_models)
    card_mb = min(_card_memory_mb(session, m) for m in models)
    if request.gpu_memory_gb * 1024 >= card_mb:
        raise InvalidRequest(
            f"gpu_memory_gb {request.gpu_memory_gb} is all of a card or more (the smallest "
            f"accepted card has {card_mb // 1024} GB): ask for a whole GPU, gpu_count 1 "
            "without gpu_memory_gb",
            field="gpu_memory_gb",
        )
    return math.ceil(Decimal(request.gpu_memory_gb * 1024 * MILLI_PER_GPU) / card_mb)


def requested_share(ctx: ServiceContext, request: SizeRequest) -> int | None:
    """The share a create request asks for, as `create_instance` would size it
    (for a price shown before the request is sent); `InvalidRequest` as there."""
    with ctx.reader() as session:
        return share_milli(session, request)


def _fraction_milli(share: Decimal) -> int:
    if share <= 0:
        raise InvalidRequest(
            f"gpu_share {share} is not a share: give a fraction of the card between 0 and 1, "
            "e.g. 0.25, or gpu_count 0 for an instance without a GPU",
            field="gpu_share",
        )
    milli = math.ceil(share * MILLI_PER_GPU)
    if milli >= MILLI_PER_GPU:
        raise InvalidRequest(
            f"gpu_share {share} is the whole card or more (once rounded up to the "
            "milli-GPU): ask for whole GPUs with gpu_count and no gpu_share",
            field="gpu_share",
        )
    return milli


def _card_memory_mb(session: Session, model: str) -> int:
    found = session.scalar(
        select(func.min(GpuDeviceModel.memory_mb)).where(GpuDeviceModel.model == model)
    )
    return int(found or 1)


def _share_size(
    settings: Settings, request: SizeRequest, shapes: list[_HostShape], milli: int
) -> Size:
    """Defaults for a share: its fraction of a GPU's part of the host (at
    least what a no-GPU instance gets)."""
    fitting = [s for s in shapes if s.gpus]
    fraction = milli / MILLI_PER_GPU
    cpu = max(settings.no_gpu_cpu, min(s.cpus / s.gpus for s in fitting) * fraction)
    memory = max(1, int(min(s.memory_gb // s.gpus for s in fitting) * fraction))
    return Size(
        cpu=_check_cpu(request.cpu, cpu, fitting),
        memory_gb=_check_memory(request.memory_gb, memory, fitting),
        disk_gb=check_disk(request.disk_gb, settings),
        system_disk_gb=_check_system_disk(request.system_disk_gb, settings),
        gpu_share_milli=milli,
    )


class EngineCpus:
    """A simulated fleet runs every container on this one engine, which gives none
    more CPUs than it has (the Docker adapter holds `nano_cpus` to that): the
    instance records that limit, not the simulated host's share. The engine's
    count is asked once a minute, not on every create (an engine round trip)."""

    TTL_S = 60.0

    def __init__(self) -> None:
        self._cpus: float | None = None
        self._asked_at = -math.inf

    def ceiling(self, ctx: ServiceContext) -> float | None:
        if self._cpus is not None and time.monotonic() - self._asked_at < self.TTL_S:
            return self._cpus
        try:
            cpus = float(ctx.runtime.engine_info().cpus)
        except GpudockError:
            return None  # sized as simulated; the container is held at start anyway
        self._cpus, self._asked_at = cpus, time.monotonic()
        return cpus
