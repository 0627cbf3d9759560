"""What the agent reports of its host: GPUs (through NVML), its engine, its version.

A part that cannot be read is reported as a problem, never as an empty host
that looks healthy: the server shows the problem beside the host.
"""

from __future__ import annotations

from gpudock import __version__
from gpudock.errors import GpudockError
from gpudock.gpu.base import GpuSource
from gpudock.link.wire import GpuReport, HostReport
from gpudock.runtime.base import Runtime


class HostInventory:
    def __init__(self, gpu_source: GpuSource, runtime: Runtime) -> None:
        self._gpus = gpu_source
        self._runtime = runtime

    @property
    def gpu_source(self) -> GpuSource:
        """The host's GPUs: its health watcher polls the same source."""
        return self._gpus

    @property
    def runtime(self) -> Runtime:
        """The host's engine: the server's runtime calls run on it, and the fence
        stops tenants through it."""
        return self._runtime

    def report(self) -> HostReport:
        """Blocking (NVML and the engine are asked): call it off the event loop."""
        report = HostReport(agent_version=__version__)
        try:
            report.engine_version = self._runtime.engine_info().server_version
        except GpudockError as exc:
            report.problems.append(f"Docker Engine: {exc.message}")
        try:
            hosts = self._gpus.discover()
        except GpudockError as exc:
            report.problems.append(f"GPUs: {exc.message}")
            return report
        for host in hosts:
            report.driver_version, report.cuda_version = host.driver_version, host.cuda_version
            report.cpus, report.memory_gb = host.cpus, host.memory_gb
            report.gpus += [
                GpuReport(
                    uuid=gpu.uuid,
                    index=gpu.index,
                    model=gpu.model,
                    memory_mb=gpu.memory_mb,
                    pci_bus_id=gpu.pci_bus_id,
                    numa_node=gpu.numa_node,
                    nvlink_peers=list(gpu.nvlink_peers),
                )
                for gpu in host.gpus
            ]
        return report
