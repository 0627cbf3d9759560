"""From facts to findings: what is wrong, and the exact command that fixes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gpudock.doctor.probe import Facts
from gpudock.images import compat

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpu_expected(facts: Facts) -> bool:
    """Inside a gpudock instance given GPUs, NVIDIA_VISIBLE_DEVICES names them."""
    value = (facts.visible_devices or "").strip().lower()
    return value not in ("", "void", "none")


def primary_cc(facts: Facts) -> str | None:
    ccs = [g.cc for g in facts.gpus if g.cc]
    return min(ccs, key=compat.version) if ccs else None


def fix_command(facts: Facts) -> str | None:
    machine = compat.machine_of(facts.machine)
    wheel = compat.recommend_torch(facts.driver, primary_cc(facts), machine)
    return wheel.command if wheel else None


def torch_toolkit(facts: Facts) -> str | None:
    """The exact CUDA toolkit of the installed torch wheel where the data knows that
    release ('2.9.0+cu128' → '12.8.1'); else torch.version.cuda, which names only X.Y."""
    release, _, variant = (facts.torch.version or "").partition("+")
    wheel = compat.find_wheel(release, variant, compat.machine_of(facts.machine))
    if wheel is not None and compat.version(wheel.torch) == compat.version(release):
        return wheel.cuda
    return facts.torch.cuda


def _unchecked(what: str, verdict: compat.Verdict, fix: str | None) -> Finding:
    return Finding(
        WARNING,
        "cuda_unknown",
        f"{what}: not checked, as gpudock's compatibility data does not cover it "
        f"({'; '.join(verdict.unknowns)})",
        fix,
    )


def diagnose(facts: Facts) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(facts))
    return findings


def _gpu(facts: Facts) -> list[Finding]:
    if facts.gpus:
        where = "NVML" if facts.gpu_source == "nvml" else "nvidia-smi (NVML unavailable)"
        return [Finding(INFO, "gpus", f"{len(facts.gpus)} GPU(s), driver {facts.driver}, {where}")]
    error = facts.gpu_error or "no GPU found"
    if "mismatch" in error.lower():
        return [
            Finding(
                ERROR,
                "driver_library_mismatch",
                f"the NVIDIA kernel module and user-space library differ ({error})",
                "reboot the host (or reload the nvidia kernel modules) after the driver upgrade",
            )
        ]
    if gpu_expected(facts):
        return [
            Finding(
                ERROR,
                "gpu_missing",
                f"this instance was given GPUs ({facts.visible_devices}) but none is visible: "
                f"{error}",
                "restart the instance; if it persists, report the host to the admin",
            )
        ]
    return [Finding(INFO, "no_gpu", f"No NVIDIA GPU on this machine ({error}); CPU only.")]


def _torch_presence(facts: Facts) -> list[Finding]:
    torch = facts.torch
    if torch.error and torch.installed:
        return [
            Finding(
                ERROR,
                "torch_broken",
                f"torch is installed but fails: {torch.error}",
                fix_command(facts),
            )
        ]
    if not torch.installed:
        if not facts.gpus:
            return [Finding(INFO, "torch_absent", "torch is not installed")]
        return [Finding(WARNING, "torch_absent", "torch is not installed", fix_command(facts))]
    return []


def _torch_build(facts: Facts) -> list[Finding]:
    torch = facts.torch
    if not torch.installed or torch.error or not facts.gpus:
        return []
    if torch.cuda is None:
        return [
            Finding(
                ERROR,
                "torch_cpu_build",
                f"CPU build of torch installed ({torch.version}) on a machine with "
                f"{len(facts.gpus)} GPU(s): torch.cuda.is_available() is False",
                f"pip uninstall -y torch && {fix_command(facts)}",
            )
        ]
    verdict = compat.check(cuda=torch_toolkit(facts), driver=facts.driver, cc=None)
    if verdict.state == compat.UNKNOWN:
        fix = "compare the driver with Table 3 of NVIDIA's CUDA release notes"
        return [_unchecked(f"torch {torch.version}'s CUDA {torch.cuda}", verdict, fix)]
    if not verdict.ok:
        return [
            Finding(
                ERROR,
                "driver_too_old",
                f"torch {torch.version} is built for {verdict.reason}",
                f"{fix_command(facts)}  (or upgrade the NVIDIA driver)",
            )
        ]
    return []


def _torch_arch(facts: Facts) -> list[Finding]:
    torch = facts.torch
    if not torch.cuda or not torch.arch_list or torch.error:
        return []
    archs = [_arch_cc(a) for a in torch.arch_list if a.startswith("sm_")]
    found = []
    for gpu in facts.gpus:
        if gpu.cc and not compat.runs_on(archs, gpu.cc):
            found.append(
                Finding(
                    ERROR,
                    "arch_missing",
                    f"GPU architecture {compat.sm(gpu.cc)} ({gpu.name}) not in this torch "
                    f"build ({' '.join(torch.arch_list)}): kernels fail with 'no kernel "
                    "image is available for execution on the device'",
                    fix_command(facts),
                )
            )
    return found[:1]


def _torch_runtime(facts: Facts) -> list[Finding]:
    torch = facts.torch
    if not torch.cuda or torch.error or not facts.gpus or torch.cuda_available:
        return []
    if facts.cuda_visible_devices is not None and not facts.cuda_visible_devices.strip():
        return [
            Finding(
                ERROR,
                "cuda_hidden",
                "CUDA_VISIBLE_DEVICES is set but empty: torch sees no GPU",
                "unset CUDA_VISIBLE_DEVICES",
            )
        ]
    return [
        Finding(
            ERROR,
            "cuda_unavailable",
            "torch.cuda.is_available() is False although the driver sees GPUs and the build fits",
            "check /dev/nvidia* inside the container and that no other process holds the GPU",
        )
    ]


def _cudnn(facts: Facts) -> list[Finding]:
    torch = facts.torch
    if torch.cuda and torch.cuda_available and torch.cudnn is None:
        return [Finding(WARNING, "cudnn_missing", "cuDNN is not available to torch")]
    return []


def _nvcc(facts: Facts) -> list[Finding]:
    if facts.nvcc is None:
        return []
    found = []
    verdict = compat.check(cuda=facts.nvcc, driver=facts.driver, cc=None)
    if facts.driver and verdict.state == compat.UNKNOWN:
        fix = f"a CUDA toolkit gpudock knows runs here: <= {compat.max_cuda(facts.driver)}"
        found.append(_unchecked(f"nvcc {facts.nvcc}", verdict, fix))
    elif facts.driver and not verdict.ok:
        found.append(
            Finding(
                WARNING,
                "nvcc_too_new",
                f"nvcc {facts.nvcc} is newer than driver {facts.driver} supports: code it "
                "compiles will not run here",
                f"use a CUDA toolkit <= {compat.max_cuda(facts.driver)}",
            )
        )
    torch_cuda = facts.torch.cuda
    if torch_cuda and compat.version(torch_cuda)[0] != compat.version(facts.nvcc)[0]:
        found.append(
            Finding(
                WARNING,
                "nvcc_torch_mismatch",
                f"nvcc {facts.nvcc} and torch's CUDA {torch_cuda} differ in major version: "
                "building CUDA extensions fails",
                f"install a CUDA {torch_cuda} toolkit for extension builds",
            )
        )
    return found


def _nvml_module(facts: Facts) -> list[Finding]:
    if facts.nvml_missing and facts.gpu_source == "nvidia-smi":
        return [Finding(INFO, "nvml_missing", "nvidia-ml-py not installed; used nvidia-smi")]
    return []


def _arch_cc(arch: str) -> str:
    digits = arch.removeprefix("sm_").rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}"


CHECKS: tuple[Callable[[Facts], list[Finding]], ...] = (
    _gpu,
    _nvml_module,
    _torch_presence,
    _torch_build,
    _torch_arch,
    _torch_runtime,
    _cudnn,
    _nvcc,
)
