"""`gpudock doctor` / `gpudock-doctor`: probe, diagnose, print; exit 0 healthy, 1 problems.

Plain text and argparse only: this runs inside bare instances without rich or typer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from gpudock.doctor.diagnose import ERROR, Finding, diagnose, fix_command
from gpudock.doctor.probe import Facts, collect


def healthy(findings: list[Finding]) -> bool:
    return not any(f.severity == ERROR for f in findings)


def as_json(facts: Facts, findings: list[Finding]) -> dict[str, Any]:
    return {
        "healthy": healthy(findings),
        "facts": facts.to_dict(),
        "findings": [f.to_dict() for f in findings],
        "recommended_torch": fix_command(facts),
    }


def _rows(facts: Facts) -> list[tuple[str, str]]:
    torch = facts.torch
    if not torch.installed:
        torch_text = "not installed"
    elif torch.error:
        torch_text = f"broken: {torch.error}"
    else:
        build = f"CUDA {torch.cuda}" if torch.cuda else "CPU build"
        torch_text = (
            f"{torch.version} ({build}), cuda.is_available()={torch.cuda_available}, "
            f"archs={' '.join(torch.arch_list) or '-'}, cuDNN={torch.cudnn or '-'}"
        )
    gpus = [f"#{g.index} {g.name} sm={g.cc or '?'} {g.memory_mb} MiB" for g in facts.gpus]
    return [
        ("Python", f"{facts.python} ({facts.executable})"),
        ("Driver", f"{facts.driver} (CUDA {facts.driver_cuda})" if facts.driver else "none"),
        ("GPUs", "; ".join(gpus) or "none"),
        ("GPU source", facts.gpu_source),
        ("torch", torch_text),
        ("nvcc", facts.nvcc or "not found"),
    ]


def render(facts: Facts, findings: list[Finding], out: TextIO) -> None:
    rows = _rows(facts)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.write(f"{key.ljust(width)}  {value}\n")
    out.write("\n")
    marks = {"error": "✗", "warning": "!", "info": "·"}
    for finding in findings:
        out.write(f"{marks.get(finding.severity, '?')} {finding.message}\n")
        if finding.fix:
            out.write(f"    fix: {finding.fix}\n")
    out.write("\nhealthy\n" if healthy(findings) else "\nproblems found\n")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpudock-doctor", description="Diagnose GPU, driver, CUDA and torch."
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch probe")
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    facts = collect(with_torch=not args.no_torch)
    findings = diagnose(facts)
    if args.json:
        stream.write(json.dumps(as_json(facts, findings), indent=2) + "\n")
    else:
        render(facts, findings, stream)
    return 0 if healthy(findings) else 1
