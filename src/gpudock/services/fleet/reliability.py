"""Reliability statistics per GPU and per model: faults, service hours, MTBF,
migrations and their interruption times."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

from sqlalchemy import select

from gpudock.db.models import (
    GpuDeviceModel,
    GpuEventModel,
    GpuFaultModel,
    GpuState,
    HostModel,
    MigrationModel,
    UserModel,
)
from gpudock.errors import Forbidden
from gpudock.reliability import GpuReliability, ModelReliability, ReliabilityReport
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.move_log import DONE

# Published field figures the seeds quote, shown beside what this fleet measured.
REFERENCE_MTBF_HOURS = {"A100": 1872.0, "RTX4090": 1420.0}
_IN_SERVICE = frozenset({GpuState.HEALTHY.value, GpuState.DRAINING.value})


def report(ctx: ServiceContext, actor: UserModel) -> ReliabilityReport:
    if not actor.is_admin:
        raise Forbidden("only an admin can read the fleet's reliability statistics")
    now = ctx.clock()
    with ctx.reader() as session:
        gpus = session.execute(
            select(GpuDeviceModel, HostModel.name)
            .join(HostModel)
            .order_by(HostModel.name, GpuDeviceModel.index)
        ).all()
        events = _by_gpu(session.scalars(select(GpuEventModel).order_by(GpuEventModel.id)))
        faults = _by_gpu(session.scalars(select(GpuFaultModel)))
        moves = list(session.scalars(select(MigrationModel)))
        per_gpu = [
            _gpu_reliability(gpu, host, events[gpu.id], faults[gpu.id], moves, now)
            for gpu, host in gpus
        ]
        interruptions = _interruptions(moves)
    moves_per_model = Counter(m.gpu_model or "none" for m in moves)
    return ReliabilityReport(
        models=_per_model(per_gpu, interruptions, moves_per_model), gpus=per_gpu
    )


_Row = TypeVar("_Row", GpuEventModel, GpuFaultModel)


def _by_gpu(rows: Iterable[_Row]) -> defaultdict[str, list[_Row]]:
    grouped: defaultdict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        grouped[row.gpu_id].append(row)
    return grouped


def _gpu_reliability(
    gpu: GpuDeviceModel,
    host: str,
    events: list[GpuEventModel],
    faults: list[GpuFaultModel],
    moves: list[MigrationModel],
    now: datetime,
) -> GpuReliability:
    hours = _service_hours(gpu, events, now)
    failures = sum(
        1
        for e in events
        if e.from_state == GpuState.HEALTHY.value
        and e.to_state != GpuState.HEALTHY.value
        and not e.reason.startswith("drained by")  # an operator's maintenance is no failure
    )
    counted = Counter(f"xid {f.xid}" if f.xid is not None else f.kind for f in faults)
    return GpuReliability(
        uuid=gpu.id,
        host=host,
        model=gpu.model,
        state=gpu.state.value,
        hours_in_service=round(hours, 6),
        failures=failures,
        mtbf_hours=round(hours / failures, 6) if failures else None,
        faults=dict(sorted(counted.items())),
        migrations=sum(1 for m in moves if gpu.id in m.from_gpus.split(",")),
    )


def _service_hours(gpu: GpuDeviceModel, events: list[GpuEventModel], now: datetime) -> float:
    """Time since first seen, less the time spent unhealthy or repairing."""
    start = gpu.first_seen_at or now
    seconds, state, since = 0.0, GpuState.HEALTHY.value, start
    for event in events:
        if state in _IN_SERVICE:
            seconds += (event.at - since).total_seconds()
        state, since = event.to_state, event.at
    if state in _IN_SERVICE:
        seconds += (now - since).total_seconds()
    return max(seconds, 0.0) / 3600


def _interruptions(moves: list[MigrationModel]) -> dict[str, list[float]]:
    """Seconds from the fault to running again, per GPU model, for finished moves off faults."""
    found: dict[str, list[float]] = defaultdict(list)
    for move in moves:
        if move.outcome == DONE and move.trigger != "start" and move.finished_at is not None:
            found[move.gpu_model or "none"].append(
                (move.finished_at - move.started_at).total_seconds()
            )
    return found


def _per_model(
    gpus: list[GpuReliability],
    interruptions: dict[str, list[float]],
    moves_per_model: Counter[str],
) -> list[ModelReliability]:
    grouped: dict[str, list[GpuReliability]] = defaultdict(list)
    for gpu in gpus:
        grouped[gpu.model].append(gpu)
    models = []
    for model, members in sorted(grouped.items()):
        hours = sum(g.hours_in_service for g in members)
        failures = sum(g.failures for g in members)
        faults: Counter[str] = Counter()
        for g in members:
            faults.update(g.faults)
        times = sorted(interruptions.get(model, []))
        models.append(
            ModelReliability(
                model=model,
                gpus=len(members),
                hours_in_service=round(hours, 6),
                failures=failures,
                mtbf_hours=round(hours / failures, 6) if failures else None,
                reference_mtbf_hours=_reference(model),
                faults=dict(sorted(faults.items())),
                migrations=moves_per_model[model],
                interruption_p50_s=round(times[len(times) // 2], 3) if times else None,
                interruption_max_s=round(times[-1], 3) if times else None,
            )
        )
    return models


def _reference(model: str) -> float | None:
    chip = model.split("-")[0].upper()
    return REFERENCE_MTBF_HOURS.get(chip)
