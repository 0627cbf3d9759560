"""Facts about this machine: GPUs and driver (NVML, else `nvidia-smi`), torch, nvcc.

Each probe returns plain data and never raises: a probe that fails records
why. The diagnosis (`diagnose.py`) works on these facts only, so tests feed
it fake facts for every broken setup.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

PROBE_TIMEOUT_S = 20.0


@dataclass
class GpuFact:
    index: int
    name: str
    cc: str | None
    memory_mb: int


@dataclass
class TorchFact:
    installed: bool
    version: str | None = None
    cuda: str | None = None  # torch.version.cuda; None for a CPU build
    cuda_available: bool = False
    arch_list: list[str] = field(default_factory=list)  # ['sm_80', ...]
    cudnn: int | None = None
    device_count: int = 0
    error: str | None = None


@dataclass
class Facts:
    python: str
    executable: str
    platform: str
    gpu_source: str  # 'nvml', 'nvidia-smi' or 'none'
    driver: str | None = None
    driver_cuda: str | None = None  # the CUDA version the driver reports
    gpus: list[GpuFact] = field(default_factory=list)
    gpu_error: str | None = None
    nvml_missing: bool = False
    torch: TorchFact = field(default_factory=lambda: TorchFact(installed=False))
    nvcc: str | None = None
    visible_devices: str | None = None  # NVIDIA_VISIBLE_DEVICES
    cuda_visible_devices: str | None = None
    machine: str = ""  # platform.machine(): which torch wheels exist for this machine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def collect(*, with_torch: bool = True) -> Facts:
    facts = Facts(
        python=platform.python_version(),
        executable=sys.executable,
        platform=platform.platform(),
        gpu_source="none",
        visible_devices=os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        machine=platform.machine(),
    )
    nvml_error = probe_nvml(facts)
    if facts.gpu_source == "none":
        smi_error = probe_nvidia_smi(facts)
        if facts.gpu_source == "none":
            facts.gpu_error = "; ".join(e for e in (nvml_error, smi_error) if e)
    if with_torch:
        facts.torch = probe_torch()
    facts.nvcc = probe_nvcc()
    return facts


def probe_nvml(facts: Facts) -> str | None:
    """Fill facts from NVML; return why not, or None on success."""
    try:
        import pynvml
    except ImportError:
        facts.nvml_missing = True
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, driver mismatch, ...
        return f"NVML: {exc}"
    try:
        facts.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        facts.driver_cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20
            name = _text(pynvml.nvmlDeviceGetName(handle))
            facts.gpus.append(GpuFact(index, name, f"{major}.{minor}", int(memory)))
        facts.gpu_source = "nvml"
        return None
    except Exception as exc:
        return f"NVML: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def probe_nvidia_smi(facts: Facts) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi not found"
    query = "index,name,compute_cap,memory.total,driver_version"
    result = _run([smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"])
    if result is None or result[0] != 0:
        return f"nvidia-smi failed: {result[1].strip() if result else 'timed out'}"
    for line in result[1].splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        cc = parts[2] if re.fullmatch(r"\d+\.\d+", parts[2]) else None
        facts.gpus.append(GpuFact(int(parts[0]), parts[1], cc, int(float(parts[3]))))
        facts.driver = parts[4]
    header = _run([smi])
    if header is not None:
        found = re.search(r"CUDA Version:\s*([\d.]+)", header[1])
        facts.driver_cuda = found.group(1) if found else None
    facts.gpu_source = "nvidia-smi"
    return None


_TORCH_SCRIPT = """
import json
info = {"installed": True}
try:
    import torch
    info["version"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["cuda_available"] = bool(torch.cuda.is_available())
    info["arch_list"] = list(torch.cuda.get_arch_list()) if info["cuda"] else []
    info["cudnn"] = torch.backends.cudnn.version() if info["cuda"] else None
    info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
except ModuleNotFoundError as exc:
    info = {"installed": exc.name != "torch", "error": str(exc)}
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def probe_torch(python: str | None = None) -> TorchFact:
    """Ask a fresh interpreter (a broken torch must not take the doctor down)."""
    result = _run([python or sys.executable, "-c", _TORCH_SCRIPT])
    if result is None:
        return TorchFact(installed=True, error="importing torch timed out")
    lines = result[1].strip().splitlines()
    try:
        info = json.loads(lines[-1])
    except (IndexError, ValueError):
        return TorchFact(installed=True, error=f"importing torch crashed: {result[1][-300:]}")
    return TorchFact(**info)


def probe_nvcc() -> str | None:
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None
    )
    if nvcc is None:
        return None
    result = _run([nvcc, "--version"])
    found = re.search(r"release ([\d.]+)", result[1]) if result else None
    return found.group(1) if found else None


def _run(command: list[str]) -> tuple[int, str] | None:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, done.stdout + done.stderr


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
