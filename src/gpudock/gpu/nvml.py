"""GPU discovery on a real NVIDIA host through NVML (nvidia-ml-py, module `pynvml`).

The pynvml module is passed in (tests hand over a fake) or imported lazily on
first use, so importing this module never needs the NVIDIA driver. Every
pynvml constant and exception class is read from that module object, and
every NVML failure leaves as a `GpuDiscoveryError` that says what to do.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpudock.gpu.base import (
    GpuDiscoveryError,
    GpuInfo,
    GpuProcess,
    GpuReading,
    GpuUtilisation,
    HealthEvent,
    HostInfo,
    ProcessReading,
    canonical_model_name,
)

# Read at call time, so tests can point it at a temporary directory.
SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")

_MIB = 1024**2
_GIB = 1024**3
_SIMULATE_HINT = "or start the server with --simulate SPEC (e.g. --simulate 1x8xA100-80GB)"
_NO_DRIVER = (
    "NVIDIA driver not found (libnvidia-ml.so.1 could not be loaded): install the "
    f"NVIDIA driver, {_SIMULATE_HINT} on a machine without NVIDIA GPUs"
)
# pynvml exception class name -> what the operator should do about it.
_INIT_ERRORS = (
    ("NVMLError_LibraryNotFound", _NO_DRIVER),
    (
        "NVMLError_DriverNotLoaded",
        "NVIDIA driver is installed but not loaded: check `nvidia-smi` and "
        f"`lsmod | grep nvidia`, reboot after a driver install, {_SIMULATE_HINT}",
    ),
    (
        "NVMLError_LibRmVersionMismatch",
        "NVIDIA driver library and kernel module versions differ (usually after a "
        "driver upgrade): reboot the host or reload the nvidia kernel modules",
    ),
    (
        "NVMLError_NoPermission",
        "no permission to use NVML: run the gpudock server as a user that can open "
        "/dev/nvidiactl and /dev/nvidia*",
    ),
)


@dataclass(frozen=True)
class _RawGpu:
    """What NVML says about one GPU before NVLink peers are resolved."""

    handle: Any
    index: int
    uuid: str
    model: str
    memory_mb: int
    pci_bus_id: str
    numa_node: int | None


@dataclass(frozen=True)
class _Links:
    """Where one GPU's active NVLinks lead (normalised bus ids)."""

    remote_bus_ids: frozenset[str]
    via_switch: bool


class NvmlGpuSource:
    """Implements `GpuSource` for the local host by asking NVML."""

    hosts_change = False

    def __init__(self, nvml: ModuleType | None = None, host_name: str | None = None) -> None:
        self._nvml = nvml
        self._host_name = host_name
        self._health: _HealthWatch | None = None
        # per GPU, the newest process-utilisation sample read (NVML's µs clock)
        self._last_seen_us: dict[str, int] = {}

    def poll_health(self, timeout_ms: int) -> list[HealthEvent]:
        """Xid and double-bit ECC events from an NVML event set kept open
        between calls, then the persistent conditions: pending or failed row
        remapping and GPUs NVML has lost."""
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        if self._health is None:
            self._health = _HealthWatch.open(nvml)
        try:
            return self._health.poll(timeout_ms)
        except nvml.NVMLError as exc:
            self._health.close()
            self._health = None
            raise GpuDiscoveryError(f"NVML health poll failed: {exc}") from exc

    def process_memory(self) -> list[GpuProcess]:
        """nvmlDeviceGetComputeRunningProcesses on every GPU (MIG and graphics
        contexts are not shares gpudock makes, so they are not asked for)."""
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        with _nvml_session(nvml):
            return [
                process
                for index in range(nvml.nvmlDeviceGetCount())
                for process in _compute_processes(nvml, index)
            ]

    def read_utilisation(self) -> GpuUtilisation:
        """nvmlDeviceGetUtilizationRates and the memory in use per GPU; per
        process, the compute processes' memory and the SM % of the samples
        NVML took since the last call (nvmlDeviceGetProcessUtilization)."""
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        gpus: list[GpuReading] = []
        processes: list[ProcessReading] = []
        with _nvml_session(nvml):
            for index in range(nvml.nvmlDeviceGetCount()):
                reading, on_gpu = self._read_gpu_use(nvml, index)
                gpus.append(reading)
                processes.extend(on_gpu)
        return GpuUtilisation(tuple(gpus), tuple(processes))

    def _read_gpu_use(
        self, nvml: ModuleType, index: int
    ) -> tuple[GpuReading, list[ProcessReading]]:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        try:
            utilisation: float | None = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except nvml.NVMLError_NotSupported:
            utilisation = None
        used_mb = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
        sm = self._process_sm_percent(nvml, handle, gpu_uuid)
        processes = [
            ProcessReading(gpu_uuid, p.pid, p.used_memory_mb, sm.get(p.pid))
            for p in _compute_processes(nvml, index)
        ]
        return GpuReading(gpu_uuid, utilisation, used_mb), processes

    def _process_sm_percent(self, nvml: ModuleType, handle: Any, gpu_uuid: str) -> dict[int, float]:
        """Mean SM % per PID over the samples newer than the last call's. NVML
        raises (NotFound, or a bare error) when it has no new sample: no figure."""
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(
                handle, self._last_seen_us.get(gpu_uuid, 0)
            )
        except nvml.NVMLError:
            return {}
        by_pid: dict[int, list[int]] = {}
        for sample in samples:
            by_pid.setdefault(int(sample.pid), []).append(int(sample.smUtil))
            newest = max(self._last_seen_us.get(gpu_uuid, 0), int(sample.timeStamp))
            self._last_seen_us[gpu_uuid] = newest
        return {pid: sum(values) / len(values) for pid, values in by_pid.items()}

    def discover(self) -> list[HostInfo]:
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        with _nvml_session(nvml):
            gpus = _discover_gpus(nvml)
            host = HostInfo(
                name=self._host_name or socket.gethostname(),
                cpus=float(os.cpu_count() or 0),
                memory_gb=_host_memory_gb(),
                driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
                cuda_version=_cuda_version(nvml),
                simulated=False,
                gpus=gpus,
            )
        return [host]


def _compute_processes(nvml: ModuleType, index: int) -> list[GpuProcess]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    try:
        running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError_NotSupported:
        return []
    return [
        GpuProcess(
            gpu_uuid=gpu_uuid,
            pid=int(p.pid),
            used_memory_mb=None if p.usedGpuMemory is None else int(p.usedGpuMemory) // _MIB,
        )
        for p in running
    ]


def nvml_available(nvml: ModuleType | None = None) -> bool:
    """True iff NVML initialises here (a driver is installed and loaded)."""
    try:
        module = nvml if nvml is not None else _import_pynvml()
        with _nvml_session(module):
            return True
    except GpuDiscoveryError:
        return False


def _import_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise GpuDiscoveryError(
            "the nvidia-ml-py package (module pynvml) is not installed: "
            f"`pip install nvidia-ml-py`, {_SIMULATE_HINT}"
        ) from exc


@contextlib.contextmanager
def _nvml_session(nvml: ModuleType) -> Iterator[None]:
    """nvmlInit() … nvmlShutdown(), with NVML errors turned into GpuDiscoveryError."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise GpuDiscoveryError(_init_failure_message(nvml, exc)) from exc
    except OSError as exc:
        raise GpuDiscoveryError(_NO_DRIVER) from exc
    try:
        yield
    except nvml.NVMLError as exc:
        raise GpuDiscoveryError(
            f"NVML query failed: {exc} ({type(exc).__name__}); check the GPUs with "
            f"`nvidia-smi` and the kernel log (`dmesg`), {_SIMULATE_HINT}"
        ) from exc
    finally:
        # A failed shutdown must not hide the discovery result or its error.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _init_failure_message(nvml: ModuleType, exc: BaseException) -> str:
    for class_name, message in _INIT_ERRORS:
        error_class = getattr(nvml, class_name, None)
        if isinstance(error_class, type) and isinstance(exc, error_class):
            return message
    return (
        f"NVML could not be initialised: {exc} ({type(exc).__name__}); "
        f"check the driver with `nvidia-smi`, {_SIMULATE_HINT}"
    )


def _discover_gpus(nvml: ModuleType) -> tuple[GpuInfo, ...]:
    raw = [_read_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    links = [_nvlinks(nvml, gpu.handle) for gpu in raw]
    uuid_by_bus = {_normalize_bus_id(gpu.pci_bus_id): gpu.uuid for gpu in raw}
    on_switch = {gpu.uuid for gpu, link in zip(raw, links, strict=True) if link.via_switch}
    gpus: list[GpuInfo] = []
    for gpu, link in zip(raw, links, strict=True):
        peers = {uuid_by_bus[bus] for bus in link.remote_bus_ids if bus in uuid_by_bus}
        if link.via_switch:
            peers |= on_switch
        gpus.append(
            GpuInfo(
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_mb=gpu.memory_mb,
                pci_bus_id=gpu.pci_bus_id,
                numa_node=gpu.numa_node,
                # In NVML index order, each peer once, never the GPU itself.
                nvlink_peers=tuple(o.uuid for o in raw if o.uuid in peers and o.uuid != gpu.uuid),
            )
        )
    return tuple(gpus)


def _read_gpu(nvml: ModuleType, index: int) -> _RawGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory_mb = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB
    bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    return _RawGpu(
        handle=handle,
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=canonical_model_name(_text(nvml.nvmlDeviceGetName(handle)), memory_mb),
        memory_mb=memory_mb,
        pci_bus_id=bus_id,
        numa_node=_numa_node(nvml, handle, bus_id),
    )


def _numa_node(nvml: ModuleType, handle: Any, bus_id: str) -> int | None:
    """NVML's answer when it has one, else the kernel's; -1 (no NUMA) is None."""
    get_numa_node = getattr(nvml, "nvmlDeviceGetNumaNodeId", None)
    if get_numa_node is not None:
        try:
            node = int(get_numa_node(handle))
        except nvml.NVMLError:
            pass
        else:
            return node if node >= 0 else None
    try:
        path = SYSFS_PCI_DEVICES / _normalize_bus_id(bus_id) / "numa_node"
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _nvlinks(nvml: ModuleType, handle: Any) -> _Links:
    """Follow every active NVLink; a link NVML cannot describe is skipped."""
    remote_pci_info = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None)
    if remote_pci_info is None:
        remote_pci_info = nvml.nvmlDeviceGetNvLinkRemotePciInfo
    remote: set[str] = set()
    via_switch = False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote.add(_normalize_bus_id(_text(remote_pci_info(handle, link).busId)))
        except nvml.NVMLError:
            continue
        via_switch = via_switch or _is_switch_link(nvml, handle, link)
    return _Links(frozenset(remote), via_switch)


def _is_switch_link(nvml: ModuleType, handle: Any, link: int) -> bool:
    """True when the link ends at an NVSwitch (HGX/DGX boards), not at a GPU.

    GPUs behind NVSwitches never see each other's bus id at the end of a link;
    every GPU on the switch fabric is a peer of every other one.
    """
    get_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", None)
    if get_type is None or switch_type is None:
        return False
    try:
        return bool(get_type(handle, link) == switch_type)
    except nvml.NVMLError:
        return False


def _cuda_version(nvml: ModuleType) -> str:
    """Highest CUDA version the driver supports: 12040 -> '12.4'."""
    version: int | None = None
    get_v2 = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
    if get_v2 is not None:
        with contextlib.suppress(nvml.NVMLError):
            version = int(get_v2())
    if version is None:
        version = int(nvml.nvmlSystemGetCudaDriverVersion())
    return f"{version // 1000}.{version % 1000 // 10}"


def _host_memory_gb() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return max(total, 0) // _GIB


def _normalize_bus_id(bus_id: str) -> str:
    """'00000000:3B:00.0' or '0000:3b:00.0' -> '0000:3b:00.0' (the sysfs name)."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = (int(part, 16) for part in rest.split("."))
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{device:02x}.{function:x}"
    except ValueError:
        return bus_id.strip().lower()


def _text(value: str | bytes) -> str:
    """pynvml returns str in current releases, bytes in old ones and in ctypes fields."""
    return value.decode() if isinstance(value, bytes) else str(value)


_WATCHED_EVENTS = ("nvmlEventTypeXidCriticalError", "nvmlEventTypeDoubleBitEccError")


@dataclass
class _HealthWatch:
    """An NVML session held open for health events (NVML counts inits, so
    discovery's own init/shutdown pairs do not close it)."""

    nvml: ModuleType
    event_set: Any
    handles: list[tuple[Any, str]]  # (device handle, uuid)

    @classmethod
    def open(cls, nvml: ModuleType) -> _HealthWatch:
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuDiscoveryError(_init_failure_message(nvml, exc)) from exc
        event_set = nvml.nvmlEventSetCreate()
        wanted = 0
        for name in _WATCHED_EVENTS:
            wanted |= getattr(nvml, name)
        handles = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            handles.append((handle, _text(nvml.nvmlDeviceGetUUID(handle))))
            # Register only what the device supports: asking for more fails the call.
            with contextlib.suppress(nvml.NVMLError_NotSupported):
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if supported & wanted:
                    nvml.nvmlDeviceRegisterEvents(handle, supported & wanted, event_set)
        return cls(nvml, event_set, handles)

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlEventSetFree(self.event_set)
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()

    def poll(self, timeout_ms: int) -> list[HealthEvent]:
        events = self._drain_events(timeout_ms)
        for handle, gpu_uuid in self.handles:
            events.extend(self._conditions(handle, gpu_uuid))
        return events

    def _drain_events(self, timeout_ms: int) -> list[HealthEvent]:
        nvml, events = self.nvml, list[HealthEvent]()
        wait = timeout_ms
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self.event_set, wait)
            except nvml.NVMLError_Timeout:
                return events
            wait = 0  # after the first event, take only what is already queued
            gpu_uuid = self._uuid_of(data.device)
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                events.append(HealthEvent(gpu_uuid, "xid", int(data.eventData)))
            elif data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
                events.append(HealthEvent(gpu_uuid, "ecc_dbe", message="NVML ECC event"))

    def _uuid_of(self, device: Any) -> str:
        for handle, gpu_uuid in self.handles:
            if handle == device:
                return gpu_uuid
        return _text(self.nvml.nvmlDeviceGetUUID(device))

    def _conditions(self, handle: Any, gpu_uuid: str) -> list[HealthEvent]:
        nvml = self.nvml
        try:
            _corrected, _uncorrected, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
        except nvml.NVMLError_GpuIsLost:
            return [HealthEvent(gpu_uuid, "gpu_lost", message="NVML: GPU is lost")]
        except nvml.NVMLError_NotSupported:
            return []  # pre-Ampere GPUs have no row remapper
        if failed:
            return [HealthEvent(gpu_uuid, "remapped_rows_failed")]
        if pending:
            return [HealthEvent(gpu_uuid, "remapped_rows_pending")]
        return []
