"""The doctor's diagnosis on fake probe facts: one test per broken setup."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudock.doctor.diagnose import ERROR, Finding, diagnose
from gpudock.doctor.probe import Facts, GpuFact, TorchFact
from gpudock.doctor.report import healthy

A100 = GpuFact(0, "NVIDIA A100-SXM4-80GB", "8.0", 81920)
RTX5090 = GpuFact(0, "NVIDIA GeForce RTX 5090", "12.0", 32607)
GOOD_TORCH = TorchFact(
    installed=True,
    version="2.5.1+cu124",
    cuda="12.4",
    cuda_available=True,
    arch_list=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    cudnn=90100,
    device_count=1,
)


def facts(**changes: object) -> Facts:
    base = Facts(
        python="3.11.7",
        executable="/usr/bin/python3",
        platform="Linux",
        gpu_source="nvml",
        driver="550.54.15",
        driver_cuda="12.4",
        gpus=[A100],
        torch=GOOD_TORCH,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def codes(found: list[Finding]) -> set[str]:
    return {f.code for f in found}


def errors(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity == ERROR]


def test_a_good_setup_is_healthy() -> None:
    found = diagnose(facts())
    assert healthy(found), found


def test_no_gpu_is_said_plainly_and_is_not_an_error() -> None:
    found = diagnose(
        facts(
            gpu_source="none",
            driver=None,
            gpus=[],
            gpu_error="nvidia-smi not found",
            torch=TorchFact(installed=False),
        )
    )
    assert healthy(found)
    assert any(f.code == "no_gpu" and "No NVIDIA GPU" in f.message for f in found)


def test_cpu_build_of_torch_on_a_gpu_machine() -> None:
    cpu = TorchFact(installed=True, version="2.13.0+cpu", cuda=None)
    [finding] = errors(diagnose(facts(torch=cpu)))
    assert finding.code == "torch_cpu_build" and "CPU build of torch" in finding.message
    assert (
        finding.fix is not None and "--index-url https://download.pytorch.org/whl/cu" in finding.fix
    )


def test_driver_too_old_for_the_torch_build() -> None:
    torch = replace(GOOD_TORCH, version="2.5.1+cu124", cuda="12.4", cuda_available=False)
    found = errors(diagnose(facts(driver="525.60.13", driver_cuda="12.0", torch=torch)))
    assert "driver_too_old" in codes(found)
    fix = next(f.fix for f in found if f.code == "driver_too_old")
    assert fix is not None and "whl/cu118" in fix


def test_new_architecture_missing_from_the_torch_build() -> None:
    found = errors(diagnose(facts(driver="575.51.03", gpus=[RTX5090])))
    [finding] = [f for f in found if f.code == "arch_missing"]
    assert "sm_120 (NVIDIA GeForce RTX 5090) not in this torch build" in finding.message
    assert "no kernel image" in finding.message
    assert finding.fix is not None and "whl/cu128" in finding.fix


def test_broken_torch_install() -> None:
    torch = TorchFact(installed=True, error="ImportError: libcudnn.so.9: cannot open shared object")
    [finding] = errors(diagnose(facts(torch=torch)))
    assert finding.code == "torch_broken" and "libcudnn" in finding.message


def test_driver_library_mismatch() -> None:
    broken = facts(
        gpu_source="none", driver=None, gpus=[], gpu_error="NVML: Driver/library version mismatch"
    )
    [finding] = errors(diagnose(broken))
    assert finding.code == "driver_library_mismatch" and finding.fix and "reboot" in finding.fix


def test_instance_given_gpus_that_it_cannot_see() -> None:
    broken = facts(
        gpu_source="none",
        driver=None,
        gpus=[],
        visible_devices="GPU-1234",
        gpu_error="nvidia-smi not found",
    )
    assert "gpu_missing" in codes(errors(diagnose(broken)))


def test_cuda_visible_devices_empty() -> None:
    torch = replace(GOOD_TORCH, cuda_available=False, device_count=0)
    found = errors(diagnose(facts(torch=torch, cuda_visible_devices="")))
    assert codes(found) == {"cuda_hidden"}


def test_cuda_unavailable_for_another_reason() -> None:
    torch = replace(GOOD_TORCH, cuda_available=False, device_count=0)
    assert codes(errors(diagnose(facts(torch=torch)))) == {"cuda_unavailable"}


def test_nvcc_newer_than_the_driver_and_unlike_torch() -> None:
    found = diagnose(facts(nvcc="13.0"))
    assert {"nvcc_too_new", "nvcc_torch_mismatch"} <= codes(found)
    assert healthy(found)  # warnings: running torch still works


def test_torch_absent_on_a_gpu_machine_suggests_the_right_wheel() -> None:
    found = diagnose(facts(torch=TorchFact(installed=False)))
    [finding] = [f for f in found if f.code == "torch_absent"]
    assert (
        finding.fix == "pip install torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118"
    )


def test_cudnn_missing_is_a_warning() -> None:
    found = diagnose(facts(torch=replace(GOOD_TORCH, cudnn=None)))
    assert "cudnn_missing" in codes(found) and healthy(found)


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
def test_the_gpu_source_is_reported(source: str) -> None:
    found = diagnose(facts(gpu_source=source, nvml_missing=source != "nvml"))
    assert any(f.code == "gpus" for f in found)
    assert ("nvml_missing" in codes(found)) == (source == "nvidia-smi")


def test_a_torch_built_for_a_toolkit_outside_the_data_is_reported_unknown() -> None:
    future = replace(GOOD_TORCH, version="2.15.0+cu134", cuda="13.4", arch_list=["sm_80"])
    found = diagnose(facts(driver="600.10", gpus=[A100], torch=future))
    [finding] = [f for f in found if f.code == "cuda_unknown"]
    assert finding.severity == "warning" and "not checked" in finding.message
    assert "CUDA 13.4" in finding.message and finding.fix and "Table 3" in finding.fix
    assert "driver_too_old" not in codes(found) and healthy(found)


def test_an_nvcc_outside_the_data_is_reported_unknown() -> None:
    found = diagnose(facts(driver="600.10", nvcc="13.4"))
    assert any(f.code == "cuda_unknown" and "nvcc 13.4" in f.message for f in found)
    assert "nvcc_too_new" not in codes(found)


def test_the_installed_wheel_is_judged_by_the_update_it_was_built_with() -> None:
    torch = replace(GOOD_TORCH, version="2.9.0+cu128", cuda="12.8", arch_list=["sm_80"])
    [finding] = [f for f in errors(diagnose(facts(driver="570.26", torch=torch)))]
    assert finding.code == "driver_too_old"
    assert "CUDA 12.8.1 needs NVIDIA driver >= 570.124.06" in finding.message


def test_a_grace_host_is_offered_an_aarch64_wheel() -> None:
    gh200 = GpuFact(0, "NVIDIA GH200 480GB", "9.0", 97871)
    found = diagnose(
        facts(machine="aarch64", driver="580.95.05", gpus=[gh200], torch=TorchFact(False))
    )
    [finding] = [f for f in found if f.code == "torch_absent"]
    assert finding.fix == (
        "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu130"
    )
    t4g = GpuFact(0, "NVIDIA T4G", "7.5", 15360)
    none_fit = diagnose(facts(machine="aarch64", gpus=[t4g], torch=TorchFact(False)))
    assert [f.fix for f in none_fit if f.code == "torch_absent"] == [None]
