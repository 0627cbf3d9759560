"""NvmlGpuSource against a faithful fake of pynvml (and the real one where a driver exists)."""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpudock.gpu import nvml as nvml_module
from gpudock.gpu.base import GpuDiscoveryError, GpuProcess, HostInfo
from gpudock.gpu.nvml import NvmlGpuSource, nvml_available

from . import fake_pynvml as fake
from .fake_pynvml import FakeGpu, FakeNvml

MIB = 1024**2


@pytest.fixture(autouse=True)
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty stand-in for /sys/bus/pci/devices, so no test reads the real one."""
    root = tmp_path / "sys-bus-pci-devices"
    root.mkdir()
    monkeypatch.setattr(nvml_module, "SYSFS_PCI_DEVICES", root)
    return root


@pytest.fixture
def a100() -> FakeNvml:
    return fake.a100_8x_nvlink()


@pytest.fixture
def h200() -> FakeNvml:
    return fake.h200_1x()


@pytest.fixture
def rtx4090() -> FakeNvml:
    return fake.rtx4090_4x()


def discover_one(nvml: FakeNvml) -> HostInfo:
    hosts = NvmlGpuSource(nvml, host_name="gpu-box-1").discover()
    assert len(hosts) == 1
    return hosts[0]


def write_numa(sysfs: Path, bus_id: str, text: str) -> None:
    device = sysfs / bus_id
    device.mkdir()
    (device / "numa_node").write_text(text)


# -- host and GPU fields --------------------------------------------------------


def test_a100_host_fields(a100: FakeNvml) -> None:
    host = discover_one(a100)

    assert host.name == "gpu-box-1"
    assert host.simulated is False
    assert host.driver_version == "550.54.15"
    assert host.cuda_version == "12.4"
    assert host.cpus == float(os.cpu_count() or 0)
    expected_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024**3
    assert host.memory_gb == expected_gb
    assert [g.index for g in host.gpus] == list(range(8))
    assert [g.uuid for g in host.gpus] == [d.uuid for d in a100.devices]
    assert [g.pci_bus_id for g in host.gpus] == list(fake.A100_BUS_IDS)
    assert {g.model for g in host.gpus} == {"A100-80GB"}
    assert {g.memory_mb for g in host.gpus} == {81920}


@pytest.mark.parametrize(
    ("make", "model", "memory_mb", "count"),
    [
        (fake.a100_8x_nvlink, "A100-80GB", 81920, 8),
        (fake.h200_1x, "H200-140GB", 143771, 1),
        (fake.rtx4090_4x, "RTX4090-24GB", 24564, 4),
        (fake.h100_8x_nvswitch, "H100-80GB", 81559, 8),
    ],
)
def test_canonical_model_names_and_memory_in_mib(
    make: Callable[[], FakeNvml], model: str, memory_mb: int, count: int
) -> None:
    host = discover_one(make())

    assert [(g.model, g.memory_mb) for g in host.gpus] == [(model, memory_mb)] * count


def test_host_name_defaults_to_the_hostname(h200: FakeNvml) -> None:
    assert NvmlGpuSource(h200).discover()[0].name == socket.gethostname()


def test_old_pynvml_returning_bytes_is_decoded() -> None:
    host = discover_one(fake.rtx4090_4x(legacy_bytes=True))

    assert host.driver_version == "535.183.01"
    assert host.gpus[0].uuid == fake.fake_uuid(0x4090, 0)
    assert host.gpus[0].model == "RTX4090-24GB"


def test_host_without_gpus_is_still_a_host() -> None:
    host = discover_one(FakeNvml([]))

    assert host.gpus == ()
    assert host.driver_version == "550.54.15"


# -- CUDA version ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [(12040, "12.4"), (13000, "13.0"), (11080, "11.8"), (12020, "12.2"), (12090, "12.9")],
)
def test_cuda_version_is_major_dot_minor(raw: int, text: str) -> None:
    assert discover_one(FakeNvml([], cuda_version=raw)).cuda_version == text


def test_cuda_version_prefers_v2() -> None:
    nvml = FakeNvml([], cuda_version=12080)

    assert discover_one(nvml).cuda_version == "12.8"
    assert nvml.count("nvmlSystemGetCudaDriverVersion_v2") == 1
    assert nvml.count("nvmlSystemGetCudaDriverVersion") == 0


def test_cuda_version_falls_back_when_v2_is_missing() -> None:
    nvml = FakeNvml([], cuda_version=11040, hidden={"nvmlSystemGetCudaDriverVersion_v2"})

    assert discover_one(nvml).cuda_version == "11.4"
    assert nvml.count("nvmlSystemGetCudaDriverVersion") == 1


def test_cuda_version_falls_back_when_the_driver_lacks_v2() -> None:
    nvml = FakeNvml(
        [],
        cuda_version=11020,
        fail={"nvmlSystemGetCudaDriverVersion_v2": fake.NVMLError_FunctionNotFound},
    )

    assert discover_one(nvml).cuda_version == "11.2"


# -- NVLink -----------------------------------------------------------------------


def test_a100_full_mesh_peers_are_uuids_each_once(a100: FakeNvml) -> None:
    host = discover_one(a100)
    uuids = [g.uuid for g in host.gpus]

    for gpu in host.gpus:
        # 12 links to 7 peers: some pairs share two links, each peer is listed once.
        assert gpu.nvlink_peers == tuple(u for u in uuids if u != gpu.uuid)


def test_every_link_up_to_the_modules_max_is_asked(a100: FakeNvml) -> None:
    discover_one(a100)

    assert a100.count("nvmlDeviceGetNvLinkState") == 8 * fake.NVML_NVLINK_MAX_LINKS


def test_gpus_without_nvlink_have_no_peers(rtx4090: FakeNvml) -> None:
    host = discover_one(rtx4090)

    assert all(g.nvlink_peers == () for g in host.gpus)
    assert rtx4090.count("nvmlDeviceGetNvLinkRemotePciInfo") == 0


def gpu(index: int, bus: str, links: tuple[str | None, ...] = ()) -> FakeGpu:
    return FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid=fake.fake_uuid(0xA040, index),
        memory_total=40960 * MIB,
        bus_id=f"00000000:{bus}:00.0",
        numa_node=0,
        nvlinks=links,
    )


def test_peers_follow_only_enabled_links_to_local_gpus() -> None:
    nvml = FakeNvml(
        [
            # Link 1 is down; link 2 ends at a device that is not one of our GPUs.
            gpu(0, "0A", ("00000000:0B:00.0", None, "00000000:FF:00.0")),
            gpu(1, "0B", ("00000000:0A:00.0",)),
            gpu(2, "0C", ("00000000:0D:00.0", "00000000:0D:00.0")),
            gpu(3, "0D", ("00000000:0C:00.0",)),
        ]
    )
    peers = [g.nvlink_peers for g in discover_one(nvml).gpus]

    u = [fake.fake_uuid(0xA040, i) for i in range(4)]
    assert peers == [(u[1],), (u[0],), (u[3],), (u[2],)]


def test_remote_bus_ids_match_whatever_their_spelling() -> None:
    nvml = FakeNvml(
        [gpu(0, "3B", ("0000:5e:00.0",)), gpu(1, "5E", ("00000000:3b:00.0",))],
    )
    peers = [g.nvlink_peers for g in discover_one(nvml).gpus]

    assert peers == [(fake.fake_uuid(0xA040, 1),), (fake.fake_uuid(0xA040, 0),)]


@pytest.mark.parametrize(
    "failing", ["nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo"]
)
def test_a_link_nvml_cannot_describe_is_skipped(failing: str) -> None:
    nvml = fake.a100_8x_nvlink(fail={failing: fake.NVMLError_Unknown})

    host = discover_one(nvml)

    assert all(g.nvlink_peers == () for g in host.gpus)
    assert len(host.gpus) == 8


def test_remote_pci_info_v2_is_preferred_when_the_module_has_it() -> None:
    nvml = fake.a100_8x_nvlink(hidden=())

    host = discover_one(nvml)

    assert len(host.gpus[0].nvlink_peers) == 7
    assert nvml.count("nvmlDeviceGetNvLinkRemotePciInfo_v2") == 8 * 12
    assert nvml.count("nvmlDeviceGetNvLinkRemotePciInfo") == 0


def test_gpus_behind_nvswitches_are_all_peers() -> None:
    host = discover_one(fake.h100_8x_nvswitch())
    uuids = [g.uuid for g in host.gpus]

    for g in host.gpus:
        assert g.nvlink_peers == tuple(u for u in uuids if u != g.uuid)


def test_without_remote_device_type_switch_links_give_no_peers() -> None:
    nvml = fake.h100_8x_nvswitch(
        hidden=fake.DEFAULT_HIDDEN | {"nvmlDeviceGetNvLinkRemoteDeviceType"}
    )

    assert all(g.nvlink_peers == () for g in discover_one(nvml).gpus)


# -- NUMA -------------------------------------------------------------------------


def test_numa_node_from_nvml(a100: FakeNvml) -> None:
    nodes = [g.numa_node for g in discover_one(a100).gpus]

    assert nodes == [0, 0, 0, 0, 1, 1, 1, 1]


def test_numa_node_falls_back_to_sysfs(h200: FakeNvml, sysfs: Path) -> None:
    # NVML says "00000000:1B:00.0"; the kernel names the device "0000:1b:00.0".
    write_numa(sysfs, "0000:1b:00.0", "1\n")

    assert discover_one(h200).gpus[0].numa_node == 1
    assert h200.count("nvmlDeviceGetNumaNodeId") == 1


def test_sysfs_minus_one_means_no_numa(h200: FakeNvml, sysfs: Path) -> None:
    write_numa(sysfs, "0000:1b:00.0", "-1\n")

    assert discover_one(h200).gpus[0].numa_node is None


@pytest.mark.parametrize("content", [None, "", "garbage"])
def test_unreadable_sysfs_means_unknown_numa(
    h200: FakeNvml, sysfs: Path, content: str | None
) -> None:
    if content is not None:
        write_numa(sysfs, "0000:1b:00.0", content)

    assert discover_one(h200).gpus[0].numa_node is None


def test_pynvml_without_numa_call_uses_sysfs(sysfs: Path) -> None:
    nvml = fake.rtx4090_4x(hidden=fake.DEFAULT_HIDDEN | {"nvmlDeviceGetNumaNodeId"})
    for i, bus in enumerate(("01", "21", "41", "61")):
        write_numa(sysfs, f"0000:{bus}:00.0", f"{i % 2}\n")

    assert [g.numa_node for g in discover_one(nvml).gpus] == [0, 1, 0, 1]
    assert nvml.count("nvmlDeviceGetNumaNodeId") == 0


def test_nvml_minus_one_numa_is_none() -> None:
    nvml = FakeNvml([FakeGpu("NVIDIA L4", "GPU-l4", 23034 * MIB, "00000000:01:00.0", -1)])

    assert discover_one(nvml).gpus[0].numa_node is None


# -- errors and the NVML session --------------------------------------------------


def test_shutdown_after_success(a100: FakeNvml) -> None:
    discover_one(a100)
    discover_one(a100)

    assert a100.count("nvmlInit") == 2
    assert a100.count("nvmlShutdown") == 2
    assert not a100.initialized
    assert a100.calls[0] == "nvmlInit"
    assert a100.calls[-1] == "nvmlShutdown"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (fake.NVMLError_LibraryNotFound, "NVIDIA driver not found"),
        (fake.NVMLError_DriverNotLoaded, "driver is installed but not loaded"),
        (fake.NVMLError_LibRmVersionMismatch, "reboot"),
        (fake.NVMLError_NoPermission, "/dev/nvidia"),
        (fake.NVMLError_Unknown, "NVML could not be initialised: Unknown Error"),
    ],
)
def test_init_failure_is_a_discovery_error_that_says_what_to_do(
    error: type[fake.NVMLError], expected: str
) -> None:
    nvml = FakeNvml(fake.h200_1x().devices, init_error=error)

    with pytest.raises(GpuDiscoveryError) as info:
        NvmlGpuSource(nvml).discover()

    assert expected in info.value.message
    assert isinstance(info.value.__cause__, error)
    assert info.value.code == "gpu_discovery_failed"
    assert nvml.calls == ["nvmlInit"]  # nothing else, and no shutdown without an init


def test_missing_driver_message_points_at_simulate() -> None:
    nvml = FakeNvml([], init_error=fake.NVMLError_LibraryNotFound)

    with pytest.raises(GpuDiscoveryError, match="install the NVIDIA driver") as info:
        NvmlGpuSource(nvml).discover()

    assert "--simulate SPEC" in info.value.message


def test_os_error_loading_the_library_is_a_missing_driver() -> None:
    nvml = FakeNvml([], init_error=OSError)

    with pytest.raises(GpuDiscoveryError, match="NVIDIA driver not found"):
        NvmlGpuSource(nvml).discover()


@pytest.mark.parametrize(
    "failing",
    [
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetPciInfo",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion",
    ],
)
def test_failure_mid_way_still_shuts_nvml_down(failing: str) -> None:
    nvml = fake.a100_8x_nvlink(
        fail={failing: fake.NVMLError_GpuIsLost},
        hidden=fake.DEFAULT_HIDDEN | {"nvmlSystemGetCudaDriverVersion_v2"},
    )

    with pytest.raises(GpuDiscoveryError, match="GPU is lost") as info:
        NvmlGpuSource(nvml).discover()

    assert isinstance(info.value.__cause__, fake.NVMLError_GpuIsLost)
    assert "nvidia-smi" in info.value.message
    assert nvml.count("nvmlShutdown") == 1
    assert not nvml.initialized


def test_unexpected_exception_still_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake.rtx4090_4x()

    def explode(raw_name: str, memory_mb: int) -> str:
        raise RuntimeError("bug")

    monkeypatch.setattr(nvml_module, "canonical_model_name", explode)
    with pytest.raises(RuntimeError):
        NvmlGpuSource(nvml).discover()

    assert nvml.count("nvmlShutdown") == 1


def test_failed_shutdown_does_not_hide_the_result() -> None:
    nvml = fake.rtx4090_4x(fail={"nvmlShutdown": fake.NVMLError_Unknown})

    assert len(discover_one(nvml).gpus) == 4


# -- nvml_available and the lazy import -------------------------------------------


def test_nvml_available_inits_and_shuts_down(h200: FakeNvml) -> None:
    assert nvml_available(h200) is True
    assert h200.calls == ["nvmlInit", "nvmlShutdown"]


@pytest.mark.parametrize("error", [fake.NVMLError_LibraryNotFound, fake.NVMLError_DriverNotLoaded])
def test_nvml_unavailable_without_a_driver(error: type[fake.NVMLError]) -> None:
    assert nvml_available(FakeNvml([], init_error=error)) is False


def test_pynvml_is_imported_lazily_from_sys_modules(
    monkeypatch: pytest.MonkeyPatch, rtx4090: FakeNvml
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", rtx4090)

    assert len(NvmlGpuSource().discover()[0].gpus) == 4
    assert nvml_available() is True


def test_missing_pynvml_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail

    source = NvmlGpuSource()  # constructing never needs pynvml
    with pytest.raises(GpuDiscoveryError, match="nvidia-ml-py") as info:
        source.discover()
    assert isinstance(info.value.__cause__, ImportError)
    assert nvml_available() is False


def test_importing_the_module_does_not_import_pynvml() -> None:
    code = "import sys, gpudock.gpu.nvml; print('pynvml' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "False"


# -- the fake stays faithful to the installed pynvml ------------------------------

FAKE_API = [
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
]


def test_fake_has_the_installed_pynvml_signatures_constants_and_errors() -> None:
    import pynvml as real

    nvml = FakeNvml([])

    for name in FAKE_API:
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(nvml, name)).parameters) == real_params, name
    assert not hasattr(real, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
    assert not hasattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
    for name in dir(fake):
        if name.startswith("NVML_") and hasattr(real, name):
            assert getattr(fake, name) == getattr(real, name), name
        if name.startswith("NVMLError_"):
            real_class, fake_class = getattr(real, name), getattr(fake, name)
            assert real_class().value == fake_class().value, name
            assert str(real_class()) == str(fake_class()), name
            assert type(real.NVMLError(real_class().value)) is real_class
            assert type(fake.NVMLError(fake_class().value)) is fake_class


def test_fake_behaves_like_pynvml_before_init() -> None:
    import pynvml as real

    nvml = fake.rtx4090_4x()

    with pytest.raises(fake.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    with pytest.raises(fake.NVMLError_Uninitialized):
        nvml.nvmlShutdown()
    if not nvml_available():  # no driver here: the real module fails the same way
        with pytest.raises(real.NVMLError_Uninitialized):
            real.nvmlDeviceGetCount()


def test_fake_returns_pynvml_value_types() -> None:
    nvml = fake.a100_8x_nvlink()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(1)

    assert isinstance(nvml.nvmlDeviceGetName(handle), str)
    assert isinstance(nvml.nvmlDeviceGetUUID(handle), str)
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    assert pci.busId == b"00000000:0F:00.0"
    assert pci.busIdLegacy == b"0000:0F:00.0"
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert (memory.total, memory.free, memory.used) == (81920 * MIB, 81920 * MIB, 0)
    assert nvml.nvmlDeviceGetNvLinkState(handle, 0) == fake.NVML_FEATURE_ENABLED
    with pytest.raises(fake.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(handle, fake.NVML_NVLINK_MAX_LINKS)
    with pytest.raises(fake.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(8)
    nvml.nvmlShutdown()


# -- a real driver, where there is one --------------------------------------------


@pytest.mark.gpu  # deselected by default; run with `pytest -m gpu` on a GPU host
def test_real_nvml_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_module, "SYSFS_PCI_DEVICES", Path("/sys/bus/pci/devices"))
    host = discover_one_real()

    assert host.simulated is False
    assert host.gpus, "a driver with no GPUs"
    major, minor = host.cuda_version.split(".")
    assert int(major) >= 10 and 0 <= int(minor) <= 9
    assert host.driver_version.count(".") >= 1
    uuids = {g.uuid for g in host.gpus}
    assert len(uuids) == len(host.gpus)
    for g in host.gpus:
        assert g.uuid.startswith(("GPU-", "MIG-"))
        assert g.memory_mb > 1024
        assert g.model.endswith("GB")
        assert set(g.nvlink_peers) <= uuids - {g.uuid}


def discover_one_real() -> HostInfo:
    hosts = NvmlGpuSource().discover()
    assert len(hosts) == 1
    return hosts[0]


# -- health (issue 6) ----------------------------------------------------------


def test_health_poll_reports_xids_from_an_event_set_kept_open(a100: FakeNvml) -> None:
    source = NvmlGpuSource(a100, host_name="h")
    assert source.poll_health(0) == []
    a100.inject_xid(2, 79)
    a100.inject_xid(5, 13)
    events = source.poll_health(100)
    uuids = [d.uuid for d in a100.devices]
    assert [(e.gpu_uuid, e.kind, e.xid) for e in events] == [
        (uuids[2], "xid", 79),
        (uuids[5], "xid", 13),
    ]
    assert a100.count("nvmlEventSetCreate") == 1  # one set for the whole life of the source
    assert source.poll_health(0) == []
    source.discover()  # discovery's own init/shutdown leaves the health session open
    a100.inject_xid(0, 48)
    assert [e.xid for e in source.poll_health(0)] == [48]


def test_health_poll_reports_remapping_and_lost_gpus_every_time(a100: FakeNvml) -> None:
    source = NvmlGpuSource(a100, host_name="h")
    source.poll_health(0)
    a100.remapped_rows[1] = (0, 1, 1, 0)
    a100.remapped_rows[3] = (0, 2, 0, 1)
    a100.lost.add(6)
    uuids = [d.uuid for d in a100.devices]
    for _ in range(2):
        found = {(e.gpu_uuid, e.kind) for e in source.poll_health(0)}
        assert found == {
            (uuids[1], "remapped_rows_pending"),
            (uuids[3], "remapped_rows_failed"),
            (uuids[6], "gpu_lost"),
        }


def test_health_poll_without_row_remapper_reports_nothing(rtx4090: FakeNvml) -> None:
    rtx4090.fail["nvmlDeviceGetRemappedRows"] = rtx4090.NVMLError_NotSupported
    assert NvmlGpuSource(rtx4090, host_name="h").poll_health(0) == []


# -- per-process memory (the share watchdog) ------------------------------------


def test_process_memory_reads_every_gpus_compute_processes(a100: FakeNvml) -> None:
    a100.run_process(0, 4242, 3 * 1024 * fake.MIB)
    a100.run_process(0, 4243, None)  # the driver cannot say
    a100.run_process(5, 99, 512 * fake.MIB)
    found = NvmlGpuSource(a100).process_memory()
    assert found == [
        GpuProcess(fake.fake_uuid(0xA100, 0), 4242, 3 * 1024),
        GpuProcess(fake.fake_uuid(0xA100, 0), 4243, None),
        GpuProcess(fake.fake_uuid(0xA100, 5), 99, 512),
    ]
    assert not a100.initialized  # the NVML session is closed again


def test_a_gpu_that_cannot_list_processes_contributes_none(h200: FakeNvml) -> None:
    h200.fail["nvmlDeviceGetComputeRunningProcesses"] = fake.NVMLError_NotSupported
    assert NvmlGpuSource(h200).process_memory() == []


def test_a_failing_process_query_is_a_discovery_error(h200: FakeNvml) -> None:
    h200.fail["nvmlDeviceGetComputeRunningProcesses"] = fake.NVMLError_Unknown
    with pytest.raises(GpuDiscoveryError, match="NVML query failed"):
        NvmlGpuSource(h200).process_memory()
