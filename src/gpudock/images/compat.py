"""The driver ↔ CUDA ↔ PyTorch ↔ GPU architecture triangle, answered from data.

Pure and standalone: the standard library only and nothing of gpudock, so the
doctor (which runs inside instances and on laptops) can carry this module.
The facts live in `compat_data.json`, each row with its source.

Two questions:
- `check(...)`: can software built for CUDA X (and, for torch, these GPU
  architectures) run on a GPU of compute capability Y with driver Z?
- `recommend_torch(driver, cc)`: which torch wheel fits this machine?

Policy: an image needs its CUDA toolkit's own minimum driver. CUDA's
minor-version compatibility (e.g. any 12.x on a >= 525.60.13 driver) runs
applications only with a limited feature set (no PTX JIT), so gpudock
reports it but does not rely on it (`strict=False` accepts it as a warning).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_DATA: dict[str, Any] | None = None  # the bundled doctor sets this directly
_FORM_FACTORS = {"SXM", "SXM2", "SXM4", "SXM5", "PCIE", "NVL", "HBM3", "HBM3E", "GEFORCE"}
_MEMORY = re.compile(r"^\d+GB$")


def data() -> dict[str, Any]:
    global _DATA
    if _DATA is None:
        _DATA = json.loads(Path(__file__).with_name("compat_data.json").read_text())
    return _DATA


def version(text: str) -> tuple[int, ...]:
    """'550.54.15' → (550, 54, 15); '12.4' → (12, 4); tolerant of suffixes."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def cc_text(cc: str | tuple[int, ...]) -> str:
    return cc if isinstance(cc, str) else ".".join(map(str, cc))


def sm(cc: str) -> str:
    """'12.0' → 'sm_120'."""
    major, minor = version(cc)[:2]
    return f"sm_{major}{minor}"


def chip_of(model: str) -> str:
    """'A100-80GB', 'NVIDIA A100-SXM4-80GB', 'NVIDIA GeForce RTX 5090' → 'A100', 'RTX5090'."""
    name = model.upper().replace("NVIDIA", " ").replace("TESLA", " ")
    tokens = [t for t in re.split(r"[\s\-_]+", name) if t]
    return "".join(t for t in tokens if t not in _FORM_FACTORS and not _MEMORY.match(t))


def compute_capability(model: str) -> str | None:
    chip = chip_of(model)
    for row in data()["gpus"]:
        if row["chip"] == chip:
            return str(row["cc"])
    return None


def min_driver(cuda: str) -> str | None:
    """The toolkit's own minimum Linux driver; for an unlisted minor, the next listed one up."""
    wanted = version(cuda)[:2]
    rows = sorted(data()["cuda_toolkit_min_driver"], key=lambda r: version(r["cuda"]))
    for row in rows:
        if version(row["cuda"])[:2] >= wanted:
            return str(row["min_driver"])
    return None


def minor_compat_driver(cuda: str) -> str | None:
    major = version(cuda)[0]
    for row in data()["minor_version_compat"]:
        if row["cuda_major"] == major:
            return str(row["min_driver"])
    return None


def max_cuda(driver: str) -> str | None:
    """The newest CUDA toolkit whose own minimum driver this driver meets."""
    best = None
    for row in data()["cuda_toolkit_min_driver"]:
        if version(driver) >= version(row["min_driver"]):
            best = (
                str(row["cuda"]) if best is None or version(row["cuda"]) > version(best) else best
            )
    return best


def cuda_arch_range(cuda: str) -> tuple[str, str] | None:
    wanted = version(cuda)[:2]
    for row in data()["cuda_arch_range"]:
        if version(row["cuda_from"])[:2] <= wanted <= version(row["cuda_to"])[:2]:
            return str(row["min_cc"]), str(row["max_cc"])
    return None


def runs_on(archs: list[str], cc: str) -> bool:
    """Can code built for `archs` (cubins) run on compute capability `cc`?

    A cubin for X.Y runs on X.Z with Z >= Y (same major). PTX JIT to a newer
    major is not counted: in practice that is where "no kernel image is
    available for execution on the device" comes from.
    """
    major, minor = version(cc)[:2]
    for arch in archs:
        a_major, a_minor = version(arch)[:2]
        if a_major == major and a_minor <= minor:
            return True
    return False


@dataclass
class Verdict:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        self.ok = False
        self.problems.append(reason)

    @property
    def reason(self) -> str:
        return "; ".join(self.problems)


def check(
    *,
    cuda: str | None,
    driver: str | None,
    cc: str | None,
    archs: list[str] | None = None,
    strict: bool = True,
) -> Verdict:
    """Can software built for CUDA `cuda` (cubins for `archs`) run on a GPU of
    compute capability `cc` with driver `driver`? Unknowns are not refused."""
    verdict = Verdict()
    if cuda is None:
        return verdict  # a CPU-only image runs anywhere
    if driver is not None:
        _check_driver(verdict, cuda, driver, strict)
    if cc is not None:
        _check_arch(verdict, cuda, cc, archs)
    return verdict


def _check_driver(verdict: Verdict, cuda: str, driver: str, strict: bool) -> None:
    needed = min_driver(cuda)
    if needed is None or version(driver) >= version(needed):
        return
    ceiling = max_cuda(driver)
    reason = (
        f"CUDA {cuda} needs NVIDIA driver >= {needed}, this one is {driver} "
        f"(it supports CUDA up to {ceiling or 'nothing gpudock knows'})"
    )
    minor = minor_compat_driver(cuda)
    if minor is not None and version(driver) >= version(minor):
        note = (
            f"{reason}; CUDA minor-version compatibility (>= {minor}) runs it only "
            "with a limited feature set (no PTX JIT)"
        )
        if not strict:
            verdict.warnings.append(note)
            return
        reason = note
    verdict.refuse(reason)


def _check_arch(verdict: Verdict, cuda: str, cc: str, archs: list[str] | None) -> None:
    span = cuda_arch_range(cuda)
    if span is not None and not version(span[0]) <= version(cc)[:2] <= version(span[1]):
        verdict.refuse(
            f"CUDA {cuda} supports compute capability {span[0]}–{span[1]}; "
            f"this GPU is {cc} ({sm(cc)})"
        )
        return
    if archs and not runs_on(archs, cc):
        verdict.refuse(
            f"GPU architecture {sm(cc)} is not in this build "
            f"({', '.join(sm(a) for a in archs)}): kernels fail with "
            "'no kernel image is available for execution on the device'"
        )


@dataclass(frozen=True)
class Wheel:
    torch: str
    variant: str  # 'cu124', or 'cpu'
    cuda: str | None
    archs: tuple[str, ...]

    @property
    def index_url(self) -> str:
        return str(data()["torch_index_url"]).format(variant=self.variant)

    @property
    def command(self) -> str:
        return f"pip install torch=={self.torch} --index-url {self.index_url}"


def variant_cuda(variant: str) -> str | None:
    """'cu124' → '12.4'; 'cu118' → '11.8'; 'cpu' → None."""
    if not variant.startswith("cu"):
        return None
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def wheels() -> list[Wheel]:
    """Every known torch wheel variant, oldest release first."""
    lists = data()["torch_arch_lists"]
    found = []
    for row in sorted(data()["torch"], key=lambda r: version(r["torch"])):
        for variant, arch_key in row["variants"].items():
            archs = tuple(lists[arch_key]["archs"])
            found.append(Wheel(row["torch"], variant, variant_cuda(variant), archs))
    return found


def torch_archs(torch: str, variant: str) -> tuple[str, ...] | None:
    key = version(torch)[:2]
    for wheel in wheels():
        if version(wheel.torch)[:2] == key and wheel.variant == variant:
            return wheel.archs
    return None


def recommend_torch(driver: str | None, cc: str | None) -> Wheel | None:
    """The newest torch wheel whose CUDA this driver meets and whose build has
    kernels for this GPU; the CPU build when there is no driver."""
    if driver is None:
        newest = wheels()[-1].torch if wheels() else None
        return Wheel(newest, "cpu", None, ()) if newest else None
    fitting = [
        w
        for w in wheels()
        if check(cuda=w.cuda, driver=driver, cc=cc, archs=list(w.archs) or None).ok
    ]
    return max(fitting, key=lambda w: (version(w.torch), version(w.cuda or "0")), default=None)
