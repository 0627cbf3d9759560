"""Prometheus exposition: the fleet's figures (`services.metrics.fleet`) as
gauges, collected fresh at every scrape.

Served two ways (docs/monitoring.md): `GET /metrics` on the API port, to an
admin's token only, since per-instance series name every tenant; or, with
`GPUDOCK_METRICS_BIND=HOST:PORT`, on a listener of its own without a token,
for a scraper on a network only it reaches.
"""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpudock.services.context import ServiceContext
from gpudock.services.metrics.fleet import FleetFigures, InstanceFigures, fleet_figures

_INSTANCE_LABELS = ["instance", "instance_id", "owner", "gpu_model", "host"]


class FleetCollector(Collector):
    """Reads the database at each scrape (a few grouped queries)."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = fleet_figures(self._ctx)
        yield from _fleet_gauges(figures)
        yield _pass_durations(self._ctx.pass_durations)
        yield from _instance_gauges(figures.instances)


def _fleet_gauges(figures: FleetFigures) -> Iterator[GaugeMetricFamily]:
    gpus = GaugeMetricFamily(
        "gpudock_gpus", "GPUs by model, host and use (free, used, unhealthy)",
        labels=["model", "host", "use"],
    )  # fmt: skip
    for count in figures.gpus:
        gpus.add_metric([count.model, count.host, count.use], count.count)
    yield gpus
    statuses = GaugeMetricFamily("gpudock_instances", "Instances by status", labels=["status"])
    for status, n in figures.instances_by_status.items():
        statuses.add_metric([status], n)
    yield statuses
    yield GaugeMetricFamily(
        "gpudock_queue_length", "Instances waiting for GPUs", value=figures.queue_length
    )
    ledger = GaugeMetricFamily(
        "gpudock_ledger_postings_micro",
        "Sum of the ledger's postings by kind, in micro-units of the currency",
        labels=["kind"],
    )
    for kind, total in sorted(figures.ledger_micro_by_kind.items()):
        ledger.add_metric([kind], total)
    yield ledger
    yield GaugeMetricFamily(
        "gpudock_ssh_sessions", "Open SSH sessions", value=figures.ssh_sessions_open
    )


def _pass_durations(durations: dict[str, float]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(
        "gpudock_reconcile_pass_seconds",
        "How long each background pass took the last time it ran",
        labels=["pass"],
    )
    for name, seconds in sorted(dict(durations).items()):
        gauge.add_metric([name], seconds)
    return gauge


def _instance_gauges(instances: list[InstanceFigures]) -> Iterator[GaugeMetricFamily]:
    def family(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*_INSTANCE_LABELS, *extra])

    cpu = family("gpudock_instance_cpu_percent", "CPU use (100 = one core busy)")
    memory = family("gpudock_instance_memory_bytes", "Memory in use, page cache excluded")
    util = family("gpudock_instance_gpu_utilisation_percent", "GPU utilisation", ("gpu",))
    gpu_memory = family("gpudock_instance_gpu_memory_used_mib", "GPU memory in use", ("gpu",))
    for figures in instances:
        labels = [
            figures.name,
            figures.instance_id,
            figures.owner,
            figures.gpu_model or "",
            figures.host,
        ]
        sample = figures.sample
        if sample.cpu_percent is not None:
            cpu.add_metric(labels, sample.cpu_percent)
        memory.add_metric(labels, sample.memory_bytes)
        for index, gpu in enumerate(sample.gpus):
            if gpu.utilisation_percent is not None:
                util.add_metric([*labels, str(index)], gpu.utilisation_percent)
            if gpu.memory_used_mb is not None:
                gpu_memory.add_metric([*labels, str(index)], gpu.memory_used_mb)
    yield from (cpu, memory, util, gpu_memory)


def fleet_registry(ctx: ServiceContext) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(ctx))
    return registry


def serve_on_own_address(ctx: ServiceContext, bind: str) -> WSGIServer:
    """Start the token-less listener on HOST:PORT (a daemon thread); returns its server."""
    host, _, port = bind.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host, registry=fleet_registry(ctx))
    return server
