"""A faithful fake of the part of pynvml (nvidia-ml-py 13.x) that gpudock.gpu.nvml uses.

`FakeNvml` is a real module object named "pynvml", so it can be injected into
`NvmlGpuSource` or placed in `sys.modules`. It mirrors the installed pynvml:

* the same function names and signatures, returning the same kinds of value:
  str from nvmlDeviceGetName / nvmlDeviceGetUUID / nvmlSystemGetDriverVersion,
  ints from the version, count, NUMA and NVLink-state calls, and struct-like
  objects whose char-array fields (`busId`, `busIdLegacy`) are *bytes*, as
  ctypes returns them;
* the same constants and the same NVMLError hierarchy: `NVMLError(3)` builds an
  `NVMLError_NotSupported`, each subclass is constructed without arguments,
  carries `.value` and prints NVML's text ("Not Supported");
* the C library's reference-counted init: any call before nvmlInit(), or after
  the matching nvmlShutdown(), raises NVMLError_Uninitialized, and so does a
  shutdown that has no init to match.

Every call is recorded in `calls`; `fail` makes a named call raise, and
`init_error` makes nvmlInit fail as it does without a driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
# nvidia-ml-py 13.x says 36 (12.x said 18); discovery must read it from the module.
NVML_NVLINK_MAX_LINKS = 36

NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

MIB = 1024**2
# nvidia-ml-py 13.x has no Python wrapper named nvmlDeviceGetNvLinkRemotePciInfo_v2
# (nvmlDeviceGetNvLinkRemotePciInfo calls the C _v2 symbol itself), so the fake
# hides it unless a test asks for it.
DEFAULT_HIDDEN = frozenset({"nvmlDeviceGetNvLinkRemotePciInfo_v2"})


class NVMLError(Exception):
    """pynvml.NVMLError: `NVMLError(code)` returns the subclass for that code."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    _errcode_to_string: ClassVar[dict[int, str]] = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    _code: ClassVar[int | None] = None
    value: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._code is not None:
            NVMLError._valClassMapping[cls._code] = cls

    def __new__(cls, *args: Any) -> NVMLError:
        if cls._code is not None:  # a subclass: its code is fixed, arguments ignored
            value = cls._code
        else:
            value = int(args[0])
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NVMLError):
            return NotImplemented
        return self.value == other.value

    __hash__ = None  # type: ignore[assignment]  # pynvml defines __eq__ only


class NVMLError_Uninitialized(NVMLError):
    _code = NVML_ERROR_UNINITIALIZED


class NVMLError_InvalidArgument(NVMLError):
    _code = NVML_ERROR_INVALID_ARGUMENT


class NVMLError_NotSupported(NVMLError):
    _code = NVML_ERROR_NOT_SUPPORTED


class NVMLError_NoPermission(NVMLError):
    _code = NVML_ERROR_NO_PERMISSION


class NVMLError_NotFound(NVMLError):
    _code = NVML_ERROR_NOT_FOUND


class NVMLError_DriverNotLoaded(NVMLError):
    _code = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_LibraryNotFound(NVMLError):
    _code = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_FunctionNotFound(NVMLError):
    _code = NVML_ERROR_FUNCTION_NOT_FOUND


class NVMLError_Timeout(NVMLError):
    _code = NVML_ERROR_TIMEOUT


class NVMLError_GpuIsLost(NVMLError):
    _code = NVML_ERROR_GPU_IS_LOST


class NVMLError_LibRmVersionMismatch(NVMLError):
    _code = NVML_ERROR_LIB_RM_VERSION_MISMATCH


class NVMLError_Unknown(NVMLError):
    _code = NVML_ERROR_UNKNOWN


# Inside FakeNvml the name NVMLError is the class attribute, so annotate with this.
ErrorClass = type[NVMLError]


@dataclass(frozen=True)
class FakeGpu:
    """One fake device.

    `bus_id` is in NVML's form ("00000000:07:00.0"). `numa_node=None` makes
    nvmlDeviceGetNumaNodeId raise NotSupported. `nvlinks[i]` is the bus id at
    the far end of link i (None: the link exists but is down); an empty tuple
    means the GPU has no NVLink, so every link query raises NotSupported.
    """

    name: str
    uuid: str
    memory_total: int
    bus_id: str
    numa_node: int | None = None
    nvlinks: tuple[str | None, ...] = ()
    memory_used: int = 0


@dataclass(frozen=True)
class FakeDeviceHandle:
    """Stands in for pynvml's opaque c_nvmlDevice_t pointer."""

    owner: int
    index: int


@dataclass
class c_nvmlEventData_t:  # pynvml's name; `device` is the handle the event came from
    device: FakeDeviceHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class FakeEventSet:
    """Stands in for pynvml's c_nvmlEventSet_t: the devices and types registered."""

    owner: int
    registered: dict[int, int]  # device index -> event type mask
    freed: bool = False


@dataclass
class c_nvmlMemory_t:  # pynvml's name
    total: int
    free: int
    used: int


@dataclass
class c_nvmlProcessInfo_t:  # pynvml's name (its friendly object has the same fields)
    pid: int
    usedGpuMemory: int | None  # bytes; None where NVML_VALUE_NOT_AVAILABLE
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class c_nvmlUtilization_t:  # pynvml's name
    gpu: int
    memory: int


@dataclass
class c_nvmlProcessUtilizationSample_t:  # pynvml's name; timeStamp in µs
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0
    encUtil: int = 0
    decUtil: int = 0


@dataclass
class nvmlPciInfo_t:  # pynvml's name
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: bytes

    @classmethod
    def from_bus_id(cls, bus_id: str) -> nvmlPciInfo_t:
        domain, bus, rest = bus_id.split(":")
        device, _function = rest.split(".")
        legacy = f"{int(domain, 16):04X}:{bus}:{rest}"
        return cls(
            busIdLegacy=legacy.encode(),
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(device, 16),
            pciDeviceId=0x20B510DE,
            pciSubSystemId=0x134F10DE,
            busId=bus_id.encode(),
        )


class FakeNvml(ModuleType):
    """A pynvml module over a list of `FakeGpu`s."""

    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    nvmlEventTypeSingleBitEccError = nvmlEventTypeSingleBitEccError
    nvmlEventTypeDoubleBitEccError = nvmlEventTypeDoubleBitEccError
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU = NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = NVML_NVLINK_DEVICE_TYPE_IBMNPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = NVML_NVLINK_DEVICE_TYPE_UNKNOWN

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibRmVersionMismatch = NVMLError_LibRmVersionMismatch
    NVMLError_Unknown = NVMLError_Unknown

    def __init__(
        self,
        devices: Sequence[FakeGpu] = (),
        *,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        init_error: type[BaseException] | None = None,
        fail: Mapping[str, ErrorClass] | None = None,
        switches: Iterable[str] = (),
        hidden: Iterable[str] = DEFAULT_HIDDEN,
        legacy_bytes: bool = False,
    ) -> None:
        """`init_error`: nvmlInit raises it. `fail`: call name -> error it raises.
        `switches`: bus ids of NVSwitches at the far end of links. `hidden`:
        attribute names this pynvml lacks (older releases). `legacy_bytes`:
        strings come back as bytes, as from nvidia-ml-py before 11.515."""
        super().__init__("pynvml", "fake pynvml for gpudock tests")
        self.hidden = frozenset(hidden)
        self.devices = list(devices)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.init_error = init_error
        self.fail = dict(fail or {})
        self.switches = frozenset(switches)
        self.legacy_bytes = legacy_bytes
        self.calls: list[str] = []
        self.refcount = 0
        # health (issue 6): what the driver would report, set by tests
        self.pending_events: list[tuple[int, int, int]] = []  # (device index, type, data)
        self.remapped_rows: dict[
            int, tuple[int, int, int, int]
        ] = {}  # index -> (corr, unc, pending, failed)
        self.lost: set[int] = set()  # device indices that answer GPU_IS_LOST
        # compute processes per device index, set by tests (`run_process`)
        self.processes: dict[int, list[c_nvmlProcessInfo_t]] = {}
        # utilisation per device index (`set_utilisation`), and the driver's
        # per-process utilisation samples (`sample_process`)
        self.utilisation: dict[int, int] = {}
        self.memory_used: dict[int, int] = {}
        self.process_samples: dict[int, list[c_nvmlProcessUtilizationSample_t]] = {}
        self.clock_us = 1_000_000

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("nvml", "NVML")) and name in ModuleType.__getattribute__(
            self, "hidden"
        ):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return ModuleType.__getattribute__(self, name)

    # -- test helpers (not pynvml) ------------------------------------------

    @property
    def initialized(self) -> bool:
        return self.refcount > 0

    def count(self, name: str) -> int:
        return self.calls.count(name)

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if self.refcount <= 0:
            raise NVMLError_Uninitialized()
        if name in self.fail:
            raise self.fail[name]()

    def _device(self, handle: object) -> FakeGpu:
        if not isinstance(handle, FakeDeviceHandle) or handle.owner != id(self):
            raise NVMLError_InvalidArgument()
        if handle.index in self.lost:
            raise NVMLError_GpuIsLost()
        return self.devices[handle.index]

    def run_process(self, index: int, pid: int, used_bytes: int | None) -> None:
        """A compute process on device `index` holding `used_bytes` (None: NVML
        cannot say), as nvmlDeviceGetComputeRunningProcesses will report it."""
        self.processes.setdefault(index, []).append(c_nvmlProcessInfo_t(pid, used_bytes))

    def set_utilisation(self, index: int, percent: int, used_bytes: int | None = None) -> None:
        """What nvmlDeviceGetUtilizationRates(...).gpu says for device `index`,
        and (if given) the memory in use nvmlDeviceGetMemoryInfo reports."""
        self.utilisation[index] = percent
        if used_bytes is not None:
            self.memory_used[index] = used_bytes

    def sample_process(self, index: int, pid: int, sm_percent: int) -> None:
        """One sample of the driver's per-process utilisation buffer, taken now
        (the fake's clock advances one second per sample)."""
        self.clock_us += 1_000_000
        sample = c_nvmlProcessUtilizationSample_t(pid, self.clock_us, sm_percent)
        self.process_samples.setdefault(index, []).append(sample)

    def inject_xid(self, index: int, xid: int) -> None:
        """What the driver does on an Xid: queue an event for registered sets."""
        self.pending_events.append((index, nvmlEventTypeXidCriticalError, xid))

    def _str(self, value: str) -> str | bytes:
        return value.encode() if self.legacy_bytes else value

    def _link(self, device: object, link: int) -> str | None:
        gpu = self._device(device)
        if not gpu.nvlinks:
            raise NVMLError_NotSupported()
        if not 0 <= link < NVML_NVLINK_MAX_LINKS or link >= len(gpu.nvlinks):
            raise NVMLError_InvalidArgument()
        return gpu.nvlinks[link]

    # -- pynvml API -----------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDeviceHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise NVMLError_InvalidArgument()
        return FakeDeviceHandle(id(self), index)

    def nvmlDeviceGetName(self, handle: object) -> str | bytes:
        self._enter("nvmlDeviceGetName")
        return self._str(self._device(handle).name)

    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes:
        self._enter("nvmlDeviceGetUUID")
        return self._str(self._device(handle).uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        gpu = self._device(handle)
        assert isinstance(handle, FakeDeviceHandle)
        used = self.memory_used.get(handle.index, gpu.memory_used)
        return c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> c_nvmlUtilization_t:
        self._enter("nvmlDeviceGetUtilizationRates")
        self._device(handle)
        assert isinstance(handle, FakeDeviceHandle)
        return c_nvmlUtilization_t(gpu=self.utilisation.get(handle.index, 0), memory=0)

    def nvmlDeviceGetProcessUtilization(
        self, handle: object, timeStamp: int
    ) -> list[c_nvmlProcessUtilizationSample_t]:
        """The buffered samples newer than `timeStamp`; as the real call, an
        error (NVML_ERROR_NOT_FOUND) when there is none."""
        self._enter("nvmlDeviceGetProcessUtilization")
        self._device(handle)
        assert isinstance(handle, FakeDeviceHandle)
        newer = [s for s in self.process_samples.get(handle.index, []) if s.timeStamp > timeStamp]
        if not newer:
            raise NVMLError_NotFound()
        return newer

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[c_nvmlProcessInfo_t]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        gpu_index = handle.index if isinstance(handle, FakeDeviceHandle) else -1
        self._device(handle)
        return list(self.processes.get(gpu_index, []))

    def nvmlDeviceGetPciInfo(self, handle: object) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo")
        return nvmlPciInfo_t.from_bus_id(self._device(handle).bus_id)

    def nvmlDeviceGetNumaNodeId(self, handle: object) -> int:
        self._enter("nvmlDeviceGetNumaNodeId")
        node = self._device(handle).numa_node
        if node is None:
            raise NVMLError_NotSupported()
        return node

    def nvmlDeviceGetNvLinkState(self, device: object, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState")
        remote = self._link(device, link)
        return NVML_FEATURE_DISABLED if remote is None else NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: object, link: int) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        return self._remote_pci_info(device, link)

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, device: object, link: int) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo_v2")
        return self._remote_pci_info(device, link)

    def _remote_pci_info(self, device: object, link: int) -> nvmlPciInfo_t:
        remote = self._link(device, link)
        if remote is None:
            raise NVMLError_NotSupported()
        return nvmlPciInfo_t.from_bus_id(remote)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        remote = self._link(handle, link)
        if remote in self.switches:
            return NVML_NVLINK_DEVICE_TYPE_SWITCH
        if any(gpu.bus_id == remote for gpu in self.devices):
            return NVML_NVLINK_DEVICE_TYPE_GPU
        return NVML_NVLINK_DEVICE_TYPE_UNKNOWN

    # -- ready-made hosts ---------------------------------------------------------

    # -- events and health counters (issue 6) -----------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        return FakeEventSet(owner=id(self), registered={})

    def nvmlEventSetFree(self, eventSet: object) -> None:
        self._enter("nvmlEventSetFree")
        if not isinstance(eventSet, FakeEventSet) or eventSet.owner != id(self):
            raise NVMLError_InvalidArgument()
        eventSet.freed = True

    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes")
        self._device(handle)
        return (
            nvmlEventTypeSingleBitEccError
            | nvmlEventTypeDoubleBitEccError
            | nvmlEventTypeXidCriticalError
        )

    def nvmlDeviceRegisterEvents(self, handle: object, eventTypes: int, eventSet: object) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        self._device(handle)
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise NVMLError_InvalidArgument()
        assert isinstance(handle, FakeDeviceHandle)
        eventSet.registered[handle.index] = eventSet.registered.get(handle.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: object, timeoutms: int) -> c_nvmlEventData_t:
        """The next queued event for a registered device and type; Timeout when none
        (the fake never blocks: the queue is filled before the call)."""
        self._enter("nvmlEventSetWait_v2")
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise NVMLError_InvalidArgument()
        for position, (index, event_type, data) in enumerate(self.pending_events):
            if eventSet.registered.get(index, 0) & event_type:
                del self.pending_events[position]
                return c_nvmlEventData_t(FakeDeviceHandle(id(self), index), event_type, data)
        raise NVMLError_Timeout()

    def nvmlDeviceGetRemappedRows(self, device: object) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows")
        self._device(device)
        assert isinstance(device, FakeDeviceHandle)
        return self.remapped_rows.get(device.index, (0, 0, 0, 0))


A100_BUS_IDS = tuple(
    f"00000000:{bus}:00.0" for bus in ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
)
H100_SWITCH_BUS_IDS = tuple(f"00000000:{bus}:00.0" for bus in ("C4", "C5", "C6", "C7"))


def fake_uuid(tag: int, index: int) -> str:
    return f"GPU-{tag:08x}-0000-4000-8000-{index:012x}"


def a100_8x_nvlink(**kwargs: Any) -> FakeNvml:
    """8x A100-SXM4-80GB, NVLink between every pair, GPUs 0-3 on NUMA 0, 4-7 on 1.

    Each GPU has 12 links; link l goes to the (l mod 7)-th other GPU, so some
    pairs share two links and discovery must report each peer once.
    """
    devices = []
    for i, bus_id in enumerate(A100_BUS_IDS):
        others = [b for b in A100_BUS_IDS if b != bus_id]
        devices.append(
            FakeGpu(
                name="NVIDIA A100-SXM4-80GB",
                uuid=fake_uuid(0xA100, i),
                memory_total=81920 * MIB,
                bus_id=bus_id,
                numa_node=0 if i < 4 else 1,
                nvlinks=tuple(others[link % 7] for link in range(12)),
            )
        )
    return FakeNvml(devices, **kwargs)


def h200_1x(**kwargs: Any) -> FakeNvml:
    """1x H200 (143771 MiB); NVML cannot tell its NUMA node, and it has no NVLink."""
    gpu = FakeGpu(
        name="NVIDIA H200",
        uuid=fake_uuid(0x4200, 0),
        memory_total=143771 * MIB,
        bus_id="00000000:1B:00.0",
        numa_node=None,
    )
    return FakeNvml([gpu], driver_version="570.124.06", cuda_version=12080, **kwargs)


def rtx4090_4x(**kwargs: Any) -> FakeNvml:
    """4x GeForce RTX 4090 (24564 MiB) on one socket, no NVLink."""
    devices = [
        FakeGpu(
            name="NVIDIA GeForce RTX 4090",
            uuid=fake_uuid(0x4090, i),
            memory_total=24564 * MIB,
            bus_id=f"00000000:{bus}:00.0",
            numa_node=0,
        )
        for i, bus in enumerate(("01", "21", "41", "61"))
    ]
    return FakeNvml(devices, driver_version="535.183.01", cuda_version=12020, **kwargs)


def h100_8x_nvswitch(**kwargs: Any) -> FakeNvml:
    """8x H100 80GB HBM3 on an HGX board: all 18 links of each GPU go to NVSwitches."""
    devices = [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=fake_uuid(0x4100, i),
            memory_total=81559 * MIB,
            bus_id=bus_id,
            numa_node=0 if i < 4 else 1,
            nvlinks=tuple(H100_SWITCH_BUS_IDS[link % 4] for link in range(18)),
        )
        for i, bus_id in enumerate(
            f"00000000:{bus}:00.0" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
        )
    ]
    return FakeNvml(devices, switches=H100_SWITCH_BUS_IDS, **kwargs)
