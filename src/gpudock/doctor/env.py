"""`gpudock env export` and `gpudock env check`: reproduce an environment, verify a machine."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from gpudock.doctor.diagnose import Finding
from gpudock.doctor.probe import Facts, collect
from gpudock.images import compat

DEFAULT_BASE = "gpudock/base:bookworm"


def pip_requirements() -> list[str]:
    """Installed distributions as pinned requirements, without needing pip."""
    pins = {
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if d.metadata["Name"] and not d.metadata["Name"].startswith("gpudock")
    }
    return sorted(pins, key=str.lower)


def conda_environment() -> str | None:
    conda = shutil.which("conda")
    if not os.environ.get("CONDA_PREFIX") or conda is None:
        return None
    done = subprocess.run(
        [conda, "env", "export", "--no-builds"], capture_output=True, text=True, timeout=60
    )
    return done.stdout if done.returncode == 0 else None


def export(directory: Path, base_image: str, facts: Facts) -> list[Path]:
    """Write requirements.txt, environment.json, [environment.yml], Dockerfile."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "requirements.txt", directory / "environment.json"]
    written[0].write_text("\n".join(pip_requirements()) + "\n")
    summary = {
        "python": facts.python,
        "driver": facts.driver,
        "driver_cuda": facts.driver_cuda,
        "gpus": [{"name": g.name, "cc": g.cc, "memory_mb": g.memory_mb} for g in facts.gpus],
        "torch": facts.torch.version,
        "torch_cuda": facts.torch.cuda,
        "torch_archs": facts.torch.arch_list,
        "nvcc": facts.nvcc,
        "base_image": base_image,
    }
    written[1].write_text(json.dumps(summary, indent=2) + "\n")
    conda = conda_environment()
    if conda is not None:
        (directory / "environment.yml").write_text(conda)
        written.append(directory / "environment.yml")
    dockerfile = directory / "Dockerfile"
    dockerfile.write_text(
        f"FROM {base_image}\n"
        "COPY requirements.txt /tmp/requirements.txt\n"
        "RUN python3 -m pip install --no-cache-dir -r /tmp/requirements.txt\n"
    )
    written.append(dockerfile)
    return written


def parse_memory_gb(text: str) -> float:
    found = re.fullmatch(r"\s*([\d.]+)\s*(GB|G|GIB|MB|M|MIB)?\s*", text.upper())
    if not found:
        raise ValueError(f"bad memory size {text!r}: e.g. 32GB")
    value = float(found.group(1))
    return value / 1024 if (found.group(2) or "GB").startswith("M") else value


def check(facts: Facts, min_capability: str | None, min_memory_gb: float | None) -> list[Finding]:
    """Errors for every need this machine does not meet."""
    if not facts.gpus:
        return [Finding("error", "no_gpu", f"no GPU here ({facts.gpu_error or 'none found'})")]
    found = []
    for gpu in facts.gpus:
        if min_capability and (
            gpu.cc is None or compat.version(gpu.cc) < compat.version(min_capability)
        ):
            found.append(
                Finding(
                    "error",
                    "capability",
                    f"GPU {gpu.index} {gpu.name} has compute capability {gpu.cc or '?'}, "
                    f"the project needs >= {min_capability}",
                )
            )
        if min_memory_gb and gpu.memory_mb / 1024 < min_memory_gb:
            found.append(
                Finding(
                    "error",
                    "memory",
                    f"GPU {gpu.index} {gpu.name} has {gpu.memory_mb / 1024:.0f} GB, "
                    f"the project needs >= {min_memory_gb:g} GB",
                )
            )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpudock-doctor env")
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export")
    exp.add_argument("--output", "-o", default="gpudock-env")
    exp.add_argument("--base", default=os.environ.get("GPUDOCK_IMAGE", DEFAULT_BASE))
    chk = sub.add_parser("check")
    chk.add_argument("--min-capability")
    chk.add_argument("--min-gpu-memory")
    chk.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "export":
        for path in export(Path(args.output), args.base, collect()):
            print(path)
        return 0
    memory = parse_memory_gb(args.min_gpu_memory) if args.min_gpu_memory else None
    findings = check(collect(with_torch=False), args.min_capability, memory)
    _print_check(findings, args.json)
    return 1 if findings else 0


def _print_check(findings: list[Finding], as_json: bool) -> None:
    if as_json:
        result: dict[str, Any] = {"ok": not findings, "findings": [f.to_dict() for f in findings]}
        print(json.dumps(result, indent=2))
        return
    for finding in findings:
        print(f"✗ {finding.message}", file=sys.stderr)
    if not findings:
        print("this machine meets the requirements")
