"""The compatibility module against a table of known cases."""

from __future__ import annotations

import pytest

from gpudock.images import compat
from gpudock.images.catalog import builtin_images


def test_driver_525_cannot_run_a_cu121_wheel() -> None:
    verdict = compat.check(cuda="12.1", driver="525.60.13", cc="8.0")
    assert not verdict.ok
    assert "CUDA 12.1 needs NVIDIA driver >= 530.30.02" in verdict.reason
    assert "supports CUDA up to 12.0" in verdict.reason
    assert "minor-version compatibility" in verdict.reason  # named, not relied upon


def test_minor_version_compatibility_is_a_warning_when_not_strict() -> None:
    verdict = compat.check(cuda="12.1", driver="525.60.13", cc="8.0", strict=False)
    assert verdict.ok and verdict.warnings
    # below the 12.x floor, minor-version compatibility does not apply either
    assert not compat.check(cuda="12.1", driver="520.61.05", cc="8.0", strict=False).ok


def test_driver_550_runs_cu124() -> None:
    archs = list(compat.torch_archs("2.5.1", "cu124") or ())
    verdict = compat.check(cuda="12.4", driver="550.54.15", cc="8.0", archs=archs)
    assert verdict.ok, verdict.reason


def test_rtx5090_without_sm120_is_no_kernel_image() -> None:
    cc = compat.compute_capability("RTX5090-32GB")
    assert cc == "12.0"
    archs = list(compat.torch_archs("2.5.1", "cu124") or ())
    verdict = compat.check(cuda="12.4", driver="575.51.03", cc=cc, archs=archs)
    assert not verdict.ok
    assert "sm_120" in verdict.reason


def test_rtx5090_with_a_cu128_build_is_fine() -> None:
    archs = list(compat.torch_archs("2.7.1", "cu128") or ())
    assert compat.check(cuda="12.8", driver="570.26", cc="12.0", archs=archs).ok


def test_cuda13_needs_a_580_driver_and_drops_volta() -> None:
    assert not compat.check(cuda="13.0", driver="575.51.03", cc="9.0").ok
    assert compat.check(cuda="13.0", driver="580.65.06", cc="9.0").ok
    refused = compat.check(cuda="13.0", driver="580.65.06", cc="7.0")
    assert not refused.ok and "7.5" in refused.reason


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("A100-80GB", "8.0"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("H200-140GB", "9.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("B200-180GB", "10.0"),
        ("NVIDIA B300 SXM6 AC", "10.3"),
        ("NVIDIA GB300", "10.3"),
        ("NVIDIA GB10", "12.1"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"),
        ("NVIDIA RTX PRO 4500 Blackwell", "12.0"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA A16", "8.6"),
        ("NVIDIA A2", "8.6"),
        ("Jetson AGX Orin", "8.7"),
        ("Jetson T5000", "11.0"),
        ("Tesla K80", "3.7"),
        ("Mystery-1GB", None),
    ],
)
def test_gpu_names_map_to_compute_capability(name: str, cc: str | None) -> None:
    assert compat.compute_capability(name) == cc


@pytest.mark.parametrize(
    ("driver", "cc", "expected"),
    [
        (
            "550.54.15",
            "8.0",
            "pip install torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118",
        ),
        (  # 2.11 and later build cu130 with 13.0 Update 2, which needs 580.95.05
            "580.65.06",
            "12.0",
            "pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128",
        ),
        (
            "580.95.05",
            "12.0",
            "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu130",
        ),
        (
            "595.71.05",
            "12.0",
            "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu132",
        ),
        (  # Volta: only the cu126 wheels still carry sm_70
            "595.71.05",
            "7.0",
            "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu126",
        ),
        (
            "525.60.13",
            "8.6",
            "pip install torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118",
        ),
        (  # 2.9's cu128 is built with 12.8 Update 1, which needs 570.124.06
            "570.26",
            "12.0",
            "pip install torch==2.8.0 --index-url https://download.pytorch.org/whl/cu128",
        ),
    ],
)
def test_recommended_wheel_fits_driver_and_gpu(driver: str, cc: str, expected: str) -> None:
    wheel = compat.recommend_torch(driver, cc)
    assert wheel is not None and wheel.command == expected


def test_no_driver_recommends_the_cpu_build() -> None:
    wheel = compat.recommend_torch(None, None)
    assert wheel is not None and wheel.variant == "cpu"


def test_every_data_row_names_a_known_source() -> None:
    data = compat.data()
    sources = set(data["sources"])
    rows = [
        *data["cuda_toolkit_min_driver"],
        *data["minor_version_compat"],
        *data["cuda_arch_range"],
        *data["gpus"],
        *data["torch"],
        *data["torch_arch_lists"].values(),
    ]
    assert rows and all(row["source"] in sources for row in rows)
    assert all(also in sources for row in rows for also in row.get("also", []))


def test_catalog_images_agree_with_the_data() -> None:
    catalog = {s.reference: s for s in builtin_images("gpudock/base:bookworm")}
    cu128 = catalog["pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"]
    assert "12.0" in cu128.compute_capabilities and cu128.min_driver == "570.26"
    assert not cu128.verdict("550.54.15", "8.0").ok  # the simulated fleet's driver
    assert (
        catalog["gpudock/base:bookworm"].verdict("450.80.02", "12.0").ok
    )  # no CUDA: runs anywhere


def test_a_toolkit_outside_the_data_is_unknown_not_ok() -> None:
    verdict = compat.check(cuda="13.9", driver="580.65.06", cc="9.0")
    assert verdict.ok  # not refused: it might run
    assert verdict.state == compat.UNKNOWN
    assert "CUDA 13.9" in verdict.label and verdict.label.startswith("unknown: ")
    assert compat.min_driver("13.9") is None
    assert compat.check(cuda="12.4", driver="550.54.15", cc="8.0").state == compat.OK


def test_torch_2_9_cu130_x86_has_no_thor_kernels() -> None:
    archs = list(compat.torch_archs("2.9.0", "cu130") or ())
    assert "11.0" not in archs and "12.0" in archs
    refused = compat.check(cuda="13.0", driver="580.65.06", cc="11.0", archs=archs)
    assert not refused.ok and "sm_110 is not in this build" in refused.reason


def test_cuda_12_9_knows_gb10_and_12_8_does_not() -> None:
    assert compat.check(cuda="12.9", driver="575.51.03", cc="12.1").state == compat.OK
    refused = compat.check(cuda="12.8", driver="575.51.03", cc="12.1")
    assert not refused.ok and "5.0–12.0" in refused.reason


def test_torch_2_1_2_cu118_on_a_k80_is_refused_for_its_driver_not_its_architecture() -> None:
    archs = list(compat.torch_archs("2.1.2", "cu118") or ())
    assert "3.7" in archs  # the wheels carry sm_37 kernels
    refused = compat.check(cuda="11.8", driver="470.256.02", cc="3.7", archs=archs)
    assert not refused.ok
    assert "CUDA 11.8 needs NVIDIA driver >= 520.61.05" in refused.reason
    assert "Kepler GPUs get no driver after the R470 branch" in refused.reason
    assert "CUDA 11.4.4 is the newest toolkit R470 runs" in refused.reason
    assert "sm_37" not in refused.reason
    assert compat.check(cuda="11.8", driver="520.61.05", cc="3.7", archs=archs).ok


def test_minor_version_compatibility_for_12x_starts_at_r525() -> None:
    # 525.60.11 is an R525 driver older than 12.0 GA's own minimum (525.60.13)
    assert compat.minor_compat_driver("12.4") == "525"
    verdict = compat.check(cuda="12.1", driver="525.60.11", cc="8.0", strict=False)
    assert verdict.ok and verdict.warnings


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [
        ("12.6", "560.28.03"),
        ("12.6.0", "560.28.03"),
        ("12.6.3", "560.35.05"),
        ("12.8.1", "570.124.06"),
        ("12.9.1", "575.57.08"),
        ("13.0.1", "580.82.07"),
        ("13.0.2", "580.95.05"),
        ("13.1", "590.44.01"),
        ("13.1.1", "590.48.01"),
        ("13.2", "595.45.04"),
        ("13.2.1", "595.58.03"),
        ("13.2.2", "595.71.05"),
    ],
)
def test_each_toolkit_release_has_its_own_minimum_driver(cuda: str, driver: str) -> None:
    assert compat.min_driver(cuda) == driver


def test_wheels_are_judged_by_the_update_they_are_built_with() -> None:
    cu126 = wheel("2.9.0", "cu126")
    assert cu126.cuda == "12.6.3"
    refused = compat.check(cuda=cu126.cuda, driver="560.28.03", cc="8.0", archs=list(cu126.archs))
    assert not refused.ok and "CUDA 12.6.3 needs NVIDIA driver >= 560.35.05" in refused.reason


def test_cuda_13_1_needs_an_r590_driver() -> None:
    refused = compat.check(cuda="13.1", driver="580.95.05", cc="9.0")
    assert not refused.ok and ">= 590.44.01" in refused.reason
    assert compat.check(cuda="13.1", driver="580.95.05", cc="9.0", strict=False).warnings


def test_an_update_newer_than_the_data_is_checked_against_the_last_one_and_flagged() -> None:
    verdict = compat.check(cuda="12.8.7", driver="575.51.03", cc="9.0")
    assert verdict.ok and verdict.state == compat.UNKNOWN
    assert ">= 570.124.06" in verdict.label
    assert not compat.check(cuda="12.8.7", driver="570.26", cc="9.0").ok


def test_catalog_images_name_the_exact_toolkit_their_tag_names() -> None:
    catalog = {s.reference: s for s in builtin_images("gpudock/base:bookworm")}
    cuda = catalog["nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"]
    assert cuda.cuda == "12.8.1" and cuda.min_driver == "570.124.06"
    assert not cuda.verdict("570.26", "9.0").ok


def wheel(torch: str, variant: str) -> compat.Wheel:
    found = compat.find_wheel(torch, variant)
    assert found is not None, (torch, variant)
    return found


def test_cuda_wheels_per_release_after_2_9() -> None:
    variants: dict[str, set[str]] = {}
    for found in compat.wheels():
        variants.setdefault(found.torch, set()).add(found.variant)
    assert variants["2.10.0"] == {"cu126", "cu128", "cu130"}
    assert variants["2.11.0"] == {"cu126", "cu128", "cu130"}
    assert variants["2.12.0"] == variants["2.14.1"] == {"cu126", "cu130", "cu132"}
    assert "7.0" in (compat.torch_archs("2.10.0", "cu128") or ())
    assert "7.0" not in (compat.torch_archs("2.11.0", "cu128") or ())
    assert wheel("2.11.0", "cu130").cuda == "13.0.2"
    assert wheel("2.14.0", "cu132").cuda == "13.2.1"
    assert wheel("2.14.1", "cu132").cuda == "13.2.2"
    assert wheel("2.13.0", "cu132").experimental and not wheel("2.14.0", "cu132").experimental


def test_aarch64_wheels_are_judged_by_their_own_arch_lists() -> None:
    aarch64 = compat.AARCH64
    assert compat.torch_archs("2.14.1", "cu126", aarch64) == ("8.0", "9.0")
    assert "11.0" in (compat.torch_archs("2.9.0", "cu130", aarch64) or ())
    assert compat.torch_archs("2.5.1", "cu124", aarch64) is None  # not in the data
    grace = compat.recommend_torch("580.95.05", "9.0", aarch64)
    assert grace is not None and (grace.torch, grace.variant) == ("2.14.1", "cu130")
    thor = compat.recommend_torch("580.95.05", "11.0", aarch64)
    assert thor is not None and thor.variant == "cu130"
    assert compat.recommend_torch("580.95.05", "11.0") is None  # no x86 wheel has sm_110
    assert compat.recommend_torch("595.71.05", "7.5", aarch64) is None  # a T4G: no sm_75
    assert compat.machine_of("arm64") == aarch64 and compat.machine_of(None) == compat.X86_64
    assert compat.recommend_torch("595.71.05", "9.0", compat.machine_of("ppc64le")) is None


def test_a_driver_refusal_still_names_a_missing_architecture() -> None:
    refused = compat.check(cuda="12.4", driver="525.60.13", cc="8.0", archs=["9.0"])
    assert "needs NVIDIA driver" in refused.reason
    assert "sm_80 is not in this build" in refused.reason


def test_architecture_spans_of_the_toolkits() -> None:
    assert compat.cuda_arch_range("11.7") == ("3.5", "8.7")
    assert compat.cuda_arch_range("13.2") == ("7.5", "12.1")
    assert compat.cuda_arch_range("13.3") is None  # not in the data: not guessed
    assert not compat.check(cuda="13.2", driver="595.45.04", cc="6.0").ok  # Pascal is gone
    assert compat.check(cuda="13.2", driver="595.45.04", cc="10.3").state == compat.OK
    assert compat.check(cuda="13.3", driver="600.1", cc="6.0").state == compat.UNKNOWN
