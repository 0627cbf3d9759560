"""Samples: an instance's curves, the latest figures of one's running
instances, and Prometheus' scrape of the whole fleet (admins only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpudock.api.deps import AdminUser, Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.metrics_schemas import (
    GpuFigurePublic,
    InstanceMetricsPublic,
    InstanceTopPublic,
    SamplePublic,
)
from gpudock.api.prometheus import fleet_registry
from gpudock.services.metrics import series
from gpudock.services.metrics.store import Sample
from gpudock.syntax import DURATION_PATTERN

router = APIRouter(tags=["metrics"])
prometheus_router = APIRouter(tags=["metrics"])


def sample_public(sample: Sample) -> SamplePublic:
    return SamplePublic(
        at=sample.at,
        resolution_s=sample.resolution_s,
        cpu_percent=sample.cpu_percent,
        memory_bytes=sample.memory_bytes,
        data_disk_bytes=sample.data_disk_bytes,
        system_disk_bytes=sample.system_disk_bytes,
        disk_read_bps=sample.disk_read_bps,
        disk_write_bps=sample.disk_write_bps,
        net_rx_bps=sample.net_rx_bps,
        net_tx_bps=sample.net_tx_bps,
        gpus=[GpuFigurePublic(**vars(g)) for g in sample.gpus],
    )


@router.get(
    "/instances/{instance_id}/metrics",
    response_model=InstanceMetricsPublic,
    responses=error_responses(404),
)
def instance_metrics(
    ctx: Context,
    user: CurrentUser,
    instance_id: str,
    since: Annotated[
        str,
        Query(
            max_length=6,
            json_schema_extra={"pattern": DURATION_PATTERN},
            description="How far back: 30m, 1h, 7d, 2w (default 1h)",
        ),
    ] = "1h",
) -> InstanceMetricsPublic:
    """The instance's samples since then, oldest first: raw for the last day,
    minute averages to 30 days, hour averages before."""
    found = series.instance_series(ctx, user, instance_id, since)
    return InstanceMetricsPublic(
        instance_id=found.instance_id,
        name=found.name,
        since=found.since,
        samples=[sample_public(s) for s in found.samples],
    )


@router.get("/metrics/instances", response_model=list[InstanceTopPublic])
def my_running_instances(ctx: Context, user: CurrentUser) -> list[InstanceTopPublic]:
    """The latest sample of each of your running instances (`gpudock instances top`)."""
    return [
        InstanceTopPublic(
            instance_id=f.instance_id,
            name=f.name,
            gpu_model=f.gpu_model,
            host=f.host,
            sample=sample_public(f.sample),
        )
        for f in series.latest_of_user(ctx, user)
    ]


@prometheus_router.get("/metrics", include_in_schema=False)
def prometheus_scrape(ctx: Context, admin: AdminUser) -> Response:
    """The fleet in Prometheus' text format; an admin token, since the per-instance
    series name every tenant (GPUDOCK_METRICS_BIND serves it without one)."""
    return Response(generate_latest(fleet_registry(ctx)), media_type=CONTENT_TYPE_LATEST)
