"""The driver ↔ CUDA ↔ PyTorch ↔ GPU architecture triangle, answered from data.

Pure and standalone: the standard library only and nothing of gpudock, so the
doctor (which runs inside instances and on laptops) can carry this module.
The facts live in `compat_data.json`, each row with its source.

Two questions:
- `check(...)`: can software built for CUDA X (and, for torch, these GPU
  architectures) run on a GPU of compute capability Y with driver Z?
- `recommend_torch(driver, cc, machine)`: which torch wheel fits this machine?

Policy: an image needs its CUDA toolkit's own minimum driver. CUDA's
minor-version compatibility (e.g. any 12.x on an R525 or newer driver) runs
applications only with a limited feature set (no PTX JIT), so gpudock
reports it but does not rely on it (`strict=False` accepts it as a warning).

A verdict has three states. `refused`: the data says it cannot run. `unknown`:
nothing was refused, but part of the question is outside the data (a CUDA
toolkit gpudock has no row for), so it was not checked; callers do not refuse
what might work, but they say so. `ok`: everything asked was checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_DATA: dict[str, Any] | None = None  # the bundled doctor sets this directly
# name words that are not the chip: form factors, memory kinds, product-line words
_NOT_THE_CHIP = {
    *("SXM", "SXM2", "SXM4", "SXM5", "SXM6", "PCIE", "NVL", "AC", "HBM3", "HBM3E"),
    *("GEFORCE", "GENERATION", "BLACKWELL", "WORKSTATION", "SERVER", "EDITION", "MAX", "Q"),
}
_MEMORY = re.compile(r"^\d+GB$")
OK, UNKNOWN, REFUSED = "ok", "unknown", "refused"  # Verdict.state
X86_64, AARCH64 = "x86_64", "aarch64"  # the machines torch publishes CUDA wheels for


def data() -> dict[str, Any]:
    global _DATA
    if _DATA is None:
        _DATA = json.loads(Path(__file__).with_name("compat_data.json").read_text())
    return _DATA


def version(text: str) -> tuple[int, ...]:
    """'550.54.15' → (550, 54, 15); '12.4' → (12, 4); tolerant of suffixes."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def sm(cc: str) -> str:
    """'12.0' → 'sm_120'."""
    major, minor = version(cc)[:2]
    return f"sm_{major}{minor}"


def chip_of(model: str) -> str:
    """'A100-80GB', 'NVIDIA A100-SXM4-80GB', 'NVIDIA GeForce RTX 5090' → 'A100', 'RTX5090';
    'NVIDIA RTX PRO 6000 Blackwell Server Edition' → 'RTXPRO6000'."""
    name = model.upper().replace("NVIDIA", " ").replace("TESLA", " ")
    tokens = [re.sub(r"[^A-Z0-9]", "", t) for t in re.split(r"[\s\-_]+", name)]
    tokens = [t for t in tokens if t]
    return "".join(t for t in tokens if t not in _NOT_THE_CHIP and not _MEMORY.match(t))


def compute_capability(model: str) -> str | None:
    chip = chip_of(model)
    for row in data()["gpus"]:
        if row["chip"] == chip:
            return str(row["cc"])
    return None


def _release(cuda: str) -> tuple[int, ...]:
    """'12.8' and '12.8.0' → (12, 8, 0): a toolkit named without its update is the GA."""
    found = version(cuda)
    return found[:2] + (found[2:] or (0,))


def _minor_rows(cuda: str) -> list[dict[str, Any]]:
    wanted = version(cuda)[:2]
    rows = [r for r in data()["cuda_toolkit_min_driver"] if version(r["cuda"])[:2] == wanted]
    return sorted(rows, key=lambda r: _release(r["cuda"]))


def min_driver(cuda: str) -> str | None:
    """The toolkit's own minimum Linux driver: '12.8' (or '12.8.0') is the GA release,
    '12.8.1' its Update 1. None for a CUDA minor the data does not list; an update newer
    than the data knows gets the newest listed one's minimum, a floor (`check` says so)."""
    rows = [r for r in _minor_rows(cuda) if _release(r["cuda"]) <= _release(cuda)]
    return str(rows[-1]["min_driver"]) if rows else None


def toolkit_listed(cuda: str) -> bool:
    """Is this exact toolkit release (GA or update) a row of the data?"""
    return any(_release(r["cuda"]) == _release(cuda) for r in _minor_rows(cuda))


def minor_compat_driver(cuda: str) -> str | None:
    major = version(cuda)[0]
    for row in data()["minor_version_compat"]:
        if row["cuda_major"] == major:
            return str(row["min_driver"])
    return None


def max_cuda(driver: str) -> str | None:
    """The newest CUDA toolkit whose own minimum driver this driver meets."""
    return _newest_toolkit(lambda needed: version(driver) >= version(needed))


def _newest_toolkit(runs: Callable[[str], bool]) -> str | None:
    fits = [str(r["cuda"]) for r in data()["cuda_toolkit_min_driver"] if runs(r["min_driver"])]
    return max(fits, key=_release, default=None)


def last_driver_branch(cc: str) -> tuple[str, int] | None:
    """(architecture, branch) when no NVIDIA driver after that branch supports this GPU."""
    for row in data()["driver_branch_ceilings"]:
        if version(cc)[0] == row["cc_major"]:
            return str(row["architecture"]), int(row["last_branch"])
    return None


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
    ok: bool = True  # False only when refused: an unknown is not a refusal
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)  # what was not checked, and why

    def refuse(self, reason: str) -> None:
        self.ok = False
        self.problems.append(reason)

    def not_checked(self, reason: str) -> None:
        self.unknowns.append(reason)

    @property
    def state(self) -> str:
        if not self.ok:
            return REFUSED
        return UNKNOWN if self.unknowns else OK

    @property
    def reason(self) -> str:
        return "; ".join(self.problems)

    @property
    def label(self) -> str:
        """'ok', 'unknown: <what was not checked>', or why it cannot run."""
        if self.state == UNKNOWN:
            return f"{UNKNOWN}: " + "; ".join(self.unknowns)
        return OK if self.ok else self.reason


def check(
    *,
    cuda: str | None,
    driver: str | None,
    cc: str | None,
    archs: list[str] | None = None,
    strict: bool = True,
) -> Verdict:
    """Can software built for CUDA `cuda` (cubins for `archs`) run on a GPU of
    compute capability `cc` with driver `driver`? A `None` argument is not asked
    about; a toolkit outside the data makes the verdict `unknown`, not `ok`."""
    verdict = Verdict()
    if cuda is None:
        return verdict  # a CPU-only image runs anywhere
    in_span = True
    if min_driver(cuda) is None and cuda_arch_range(cuda) is None:
        verdict.not_checked(
            f"CUDA {cuda} is not in gpudock's compatibility data: "
            "its driver and GPU needs were not checked"
        )
    else:
        if driver is not None:
            _check_driver(verdict, cuda, driver, cc, strict)
        if cc is not None:
            in_span = _check_span(verdict, cuda, cc)
    if cc is not None and archs and in_span:  # outside the span, the build is beside the point
        _check_archs(verdict, cc, archs)
    return verdict


def _check_driver(verdict: Verdict, cuda: str, driver: str, cc: str | None, strict: bool) -> None:
    needed = min_driver(cuda)
    if needed is None:
        verdict.not_checked(f"CUDA {cuda}'s minimum driver is not in gpudock's data")
        return
    if not toolkit_listed(cuda):
        major_minor = ".".join(map(str, version(cuda)[:2]))
        verdict.not_checked(
            f"CUDA {cuda} is newer than gpudock's data for CUDA {major_minor}: "
            f"the driver was checked only against the newest update it lists (>= {needed})"
        )
    if version(driver) >= version(needed):
        return
    notes = [
        f"CUDA {cuda} needs NVIDIA driver >= {needed}, this one is {driver} "
        f"(it supports CUDA up to {max_cuda(driver) or 'nothing gpudock knows'})"
    ]
    minor = minor_compat_driver(cuda)
    compatible = minor is not None and version(driver) >= version(minor)
    if compatible:
        notes.append(
            f"CUDA minor-version compatibility (>= {minor}) runs it only "
            "with a limited feature set (no PTX JIT)"
        )
    ceiling = last_driver_branch(cc) if cc else None
    if ceiling is not None and version(needed)[0] > ceiling[1]:
        newest = _newest_toolkit(lambda need: version(need)[0] <= ceiling[1])
        notes.append(
            f"{ceiling[0]} GPUs get no driver after the R{ceiling[1]} branch, so no driver "
            f"upgrade fixes this: CUDA {newest} is the newest toolkit R{ceiling[1]} runs"
        )
    if compatible and not strict:
        verdict.warnings.append("; ".join(notes))
    else:
        verdict.refuse("; ".join(notes))


def _check_span(verdict: Verdict, cuda: str, cc: str) -> bool:
    """False when the toolkit cannot target this GPU at all."""
    span = cuda_arch_range(cuda)
    if span is None:
        verdict.not_checked(f"the GPU architectures CUDA {cuda} supports are not in gpudock's data")
    elif not version(span[0]) <= version(cc)[:2] <= version(span[1]):
        verdict.refuse(
            f"CUDA {cuda} supports compute capability {span[0]}–{span[1]}; "
            f"this GPU is {cc} ({sm(cc)})"
        )
        return False
    return True


def _check_archs(verdict: Verdict, cc: str, archs: list[str]) -> None:
    if not runs_on(archs, cc):
        verdict.refuse(
            f"GPU architecture {sm(cc)} is not in this build "
            f"({', '.join(sm(a) for a in archs)}): kernels fail with "
            "'no kernel image is available for execution on the device'"
        )


@dataclass(frozen=True)
class Wheel:
    torch: str
    variant: str  # 'cu124', or 'cpu'
    cuda: str | None  # the exact toolkit where the data knows it ('12.8.1'), else '12.8'
    archs: tuple[str, ...]
    experimental: bool = False

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


def wheels(machine: str = X86_64) -> list[Wheel]:
    """Every known torch wheel variant for `machine`, oldest release first."""
    lists = data()["torch_arch_lists"]
    found = []
    for row in sorted(data()["torch"], key=lambda r: version(r["torch"])):
        for variant, build in row["variants"].items():
            if machine not in build:
                continue  # no wheel for this machine that the data knows of
            cuda = build.get("cuda") or variant_cuda(variant)
            archs = tuple(lists[build[machine]]["archs"])
            experimental = build.get("status") == "experimental"
            found.append(Wheel(row["torch"], variant, cuda, archs, experimental))
    return found


def find_wheel(torch: str, variant: str, machine: str = X86_64) -> Wheel | None:
    """The wheel of this exact torch release, else of the newest known patch of its minor."""
    same = [w for w in wheels(machine) if w.variant == variant]
    exact = [w for w in same if version(w.torch) == version(torch)]
    minor = [w for w in same if version(w.torch)[:2] == version(torch)[:2]]
    found = exact or minor
    return found[-1] if found else None


def torch_archs(torch: str, variant: str, machine: str = X86_64) -> tuple[str, ...] | None:
    wheel = find_wheel(torch, variant, machine)
    return wheel.archs if wheel else None


def machine_of(name: str | None) -> str:
    """`platform.machine()` → the machine key of the wheel rows ('arm64' → 'aarch64',
    'AMD64' → 'x86_64'); unrecorded → x86_64. Others (ppc64le) have no CUDA wheels."""
    lowered = (name or X86_64).lower()
    return {"arm64": AARCH64, "amd64": X86_64}.get(lowered, lowered)


def recommend_torch(driver: str | None, cc: str | None, machine: str = X86_64) -> Wheel | None:
    """The newest torch wheel for `machine` whose CUDA this driver meets and whose
    build has kernels for this GPU; the CPU build when there is no driver."""
    if driver is None:
        newest = max((r["torch"] for r in data()["torch"]), key=version, default=None)
        return Wheel(newest, "cpu", None, ()) if newest else None
    fitting = [
        w
        for w in wheels(machine)
        if check(cuda=w.cuda, driver=driver, cc=cc, archs=list(w.archs) or None).state == OK
    ]
    # within a release, a stable variant before an experimental one
    return max(
        fitting,
        key=lambda w: (version(w.torch), not w.experimental, version(w.cuda or "0")),
        default=None,
    )
