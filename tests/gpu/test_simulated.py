"""SimulatedGpuSource: a fleet from a spec string, for machines without GPUs."""

from __future__ import annotations

import pytest

from gpudock.errors import InvalidRequest
from gpudock.gpu.base import GpuSource
from gpudock.gpu.simulated import (
    SIMULATED_CUDA_VERSION,
    SIMULATED_DRIVER_VERSION,
    FleetPart,
    SimulatedGpuSource,
    parse_fleet_spec,
)

SPEC = "2x8xA100-80GB,1x4xRTX4090-24GB"


def test_spec_gives_three_hosts_and_twenty_gpus() -> None:
    hosts = SimulatedGpuSource(SPEC).discover()

    assert len(hosts) == 3
    assert [len(h.gpus) for h in hosts] == [8, 8, 4]
    assert sum(len(h.gpus) for h in hosts) == 20
    assert [h.gpus[0].model for h in hosts] == ["A100-80GB", "A100-80GB", "RTX4090-24GB"]
    assert {g.memory_mb for g in hosts[0].gpus} == {80 * 1024}
    assert {g.memory_mb for g in hosts[2].gpus} == {24 * 1024}
    assert len({h.name for h in hosts}) == 3


def test_hosts_are_marked_simulated() -> None:
    for host in SimulatedGpuSource(SPEC).discover():
        assert host.simulated is True
        assert host.driver_version == SIMULATED_DRIVER_VERSION
        assert host.cuda_version == SIMULATED_CUDA_VERSION
        assert host.cpus > 0
        assert host.memory_gb > 0
        assert [g.index for g in host.gpus] == list(range(len(host.gpus)))


def test_uuids_are_stable_across_instances_and_distinct() -> None:
    first = [g.uuid for h in SimulatedGpuSource(SPEC).discover() for g in h.gpus]
    second = [g.uuid for h in SimulatedGpuSource(SPEC).discover() for g in h.gpus]

    assert first == second
    assert len(set(first)) == 20
    assert all(u.startswith("GPU-") for u in first)


def test_nvlink_for_a100_but_not_rtx4090() -> None:
    a100_host, _, rtx_host = SimulatedGpuSource(SPEC).discover()

    a100_uuids = [g.uuid for g in a100_host.gpus]
    for gpu in a100_host.gpus:
        assert gpu.nvlink_peers == tuple(u for u in a100_uuids if u != gpu.uuid)
    assert all(g.nvlink_peers == () for g in rtx_host.gpus)


def test_numa_halves_and_distinct_bus_ids() -> None:
    host = SimulatedGpuSource("1x8xH100-80GB").discover()[0]

    assert [g.numa_node for g in host.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({g.pci_bus_id for g in host.gpus}) == 8


def test_discover_returns_a_fresh_list() -> None:
    source = SimulatedGpuSource("1x1xH200-141GB")
    source.discover().clear()

    assert len(source.discover()) == 1


def test_implements_the_gpu_source_protocol() -> None:
    source: GpuSource = SimulatedGpuSource("1x1xA100-40GB")

    assert source.discover()[0].gpus[0].model == "A100-40GB"


def test_parse_fleet_spec_tolerates_spaces() -> None:
    assert parse_fleet_spec(" 2x8xA100-80GB , 1x4xRTX4090-24GB ") == [
        FleetPart(2, 8, "A100-80GB", 80 * 1024),
        FleetPart(1, 4, "RTX4090-24GB", 24 * 1024),
    ]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("", "''"),
        ("8xA100", "'8xA100'"),
        ("2x8xA100", "'A100'"),
        ("0x8xA100-80GB", "'0x8xA100-80GB'"),
        ("2x99xA100-80GB", "'2x99xA100-80GB'"),
        ("2x8xA100-80GB,,1x4xRTX4090-24GB", "''"),
        ("2x8xA100-80GB,1x0xRTX4090-24GB", "'1x0xRTX4090-24GB'"),
    ],
)
def test_bad_specs_name_the_bad_part(spec: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        SimulatedGpuSource(spec)

    assert named in info.value.message
    assert info.value.field == "simulate"
    assert info.value.code == "invalid_request"


def test_bus_ids_stay_valid_pci_addresses_on_a_16_gpu_host() -> None:
    host = SimulatedGpuSource("1x16xA100-80GB").discover()[0]

    for gpu in host.gpus:
        _domain, bus, _device_function = gpu.pci_bus_id.split(":")
        assert len(bus) == 2, gpu.pci_bus_id
