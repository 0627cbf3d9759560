"""The openb trace family: the default trace resampled towards one kind of workload.

The FGD paper's artifact evaluates 23 traces, each the default one resampled so
that one kind of pod takes a given share. Only five of them are published, so
this module makes the others from the default trace, reading each name the way
the published ones and the artifact's plotting scripts (axis labels) show:

  cpuXXX       CPU-only pods are XXX/10 % of all pods by count (cpu050: 5 %,
               cpu300: 30 %). The GPU pods are kept as they are; CPU-only pods
               are drawn from the default ones, without replacement when fewer
               are needed and with replacement when more.
  gpushareXX   GPU-sharing pods ask for XX % of the GPU requested (in milli).
               The pod count and the CPU-only pods are kept; the GPU pods are
               drawn with replacement, sharing ones from the default's sharing
               pods and the rest from its whole-GPU pods, in the numbers that
               make the sharing pods' expected part XX %.
  gpuspecXX    pods asking for XX % of the GPU requested carry a GPU-model
               constraint. Pods are taken in a seeded random order until their
               GPU request reaches XX %; each gets a constraint drawn from a
               given list: that of its request (GPUs, milli, CPU, memory) if
               it recurs there, else that of its shape (share, or k GPUs). The
               default trace has none, so the list is the published gpuspec10's.
  multigpuXX   multi-GPU pods ask for XX % of the GPU requested. All default
               pods are kept and multi-GPU pods drawn with replacement from the
               default's are appended until their part reaches XX %.

Checked against the published members: cpu050 has 5.0 % CPU-only pods and the
default's GPU pods unchanged; gpushare40's sharing pods ask 40.1 % and its
CPU-only pods are the default's; gpuspec10 constrains 10.4 % of GPU pods
(10.9 % of the GPU request); multigpu20 is the default plus 172 multi-GPU pods
(20.4 %). Rows are the default's own (all columns kept), renamed in order.
Pure: rows in, rows out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from gpudock.scheduler.demand import MILLI_PER_GPU

Row = dict[str, str]
Shape = tuple[int, ...]  # (GPUs, is a share), or the full (GPUs, milli, CPU, memory)
KINDS = ("cpu", "gpushare", "gpuspec", "multigpu")
MIN_EXAMPLES = 5  # constraints seen for a request before its own mix is used
_NAME = re.compile(r"^(cpu|gpushare|gpuspec|multigpu)(\d+)$")


def parse_name(name: str) -> tuple[str, float]:
    """("gpushare", 0.8) for "gpushare80"; ("cpu", 0.05) for "cpu050"."""
    match = _NAME.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a family name ({', '.join(k + 'NN' for k in KINDS)})")
    kind, digits = match.group(1), match.group(2)
    fraction = int(digits) / (1000.0 if kind == "cpu" else 100.0)
    if kind == "cpu" and not 0.0 <= fraction < 1.0:
        raise ValueError(f"{name!r}: CPU-only pods must be less than 100 % of the pods")
    if kind != "cpu" and not 0.0 < fraction <= 1.0:
        raise ValueError(f"{name!r}: the share must be in (0, 100] %")
    return kind, fraction


def gpu_milli(row: Mapping[str, str]) -> int:
    gpus, milli = int(row["num_gpu"]), int(row.get("gpu_milli") or 0)
    if gpus <= 0 or milli <= 0:
        return 0
    return gpus * min(milli, MILLI_PER_GPU) if gpus == 1 else gpus * MILLI_PER_GPU


def shape(row: Mapping[str, str]) -> Shape:
    gpus = int(row["num_gpu"])
    return gpus, int(gpus == 1 and int(row.get("gpu_milli") or 0) < MILLI_PER_GPU)


def request(row: Mapping[str, str]) -> Shape:
    return tuple(int(row.get(k) or 0) for k in ("num_gpu", "gpu_milli", "cpu_milli", "memory_mib"))


def constraint_choices(rows: Sequence[Mapping[str, str]]) -> dict[Shape, list[tuple[str, int]]]:
    """The GPU-model constraints of a trace and how often each occurs, by pod shape
    and, where a request recurs with at least MIN_EXAMPLES constraints, by request."""
    counts: dict[Shape, Counter[str]] = {}
    for row in rows:
        spec = (row.get("gpu_spec") or "").strip()
        if gpu_milli(row) and spec and spec.lower() != "nan":
            counts.setdefault(shape(row), Counter())[spec] += 1
            counts.setdefault(request(row), Counter())[spec] += 1
    return {
        s: sorted(c.items())
        for s, c in sorted(counts.items())
        if len(s) == 2 or sum(c.values()) >= MIN_EXAMPLES
    }


def resample(
    rows: Sequence[Mapping[str, str]],
    name: str,
    seed: int,
    constraints: Mapping[Shape, Sequence[tuple[str, int]]] | None = None,
) -> list[Row]:
    """The trace `name` of the family, made from the default trace's `rows`."""
    kind, fraction = parse_name(name)
    rng = np.random.default_rng(seed)
    base = [dict(r) for r in rows]
    if kind == "cpu":
        out = _towards_cpu(base, fraction, rng)
    elif kind == "gpushare":
        out = _towards_sharing(base, fraction, rng)
    elif kind == "multigpu":
        out = _towards_multi_gpu(base, fraction, rng)
    else:
        if not constraints:
            raise ValueError("gpuspec traces need a list of constraints by pod shape")
        out = _with_constraints(base, fraction, rng, constraints)
    width = max(4, len(str(len(out) - 1)))
    return [{**r, "name": f"openb-pod-{i:0{width}d}"} for i, r in enumerate(out)]


def _draw(pool: Sequence[Row], count: int, rng: np.random.Generator, replace: bool) -> list[Row]:
    if count <= 0 or not pool:
        return []
    picks = rng.choice(len(pool), size=count, replace=replace)
    return [dict(pool[int(i)]) for i in picks]


def _towards_cpu(rows: list[Row], fraction: float, rng: np.random.Generator) -> list[Row]:
    gpu = [r for r in rows if gpu_milli(r)]
    cpu = [r for r in rows if not gpu_milli(r)]
    want = round(fraction / (1.0 - fraction) * len(gpu))
    if want <= len(cpu):
        keep = sorted(rng.choice(len(cpu), size=want, replace=False).tolist())
        chosen = {id(cpu[i]) for i in keep}
        return [r for r in rows if gpu_milli(r) or id(r) in chosen]
    return rows + _draw(cpu, want - len(cpu), rng, replace=True)


def _towards_sharing(rows: list[Row], fraction: float, rng: np.random.Generator) -> list[Row]:
    shares = [r for r in rows if gpu_milli(r) and shape(r)[1]]
    wholes = [r for r in rows if gpu_milli(r) and not shape(r)[1]]
    count = len(shares) + len(wholes)
    mean_share = float(np.mean([gpu_milli(r) for r in shares]))
    mean_whole = float(np.mean([gpu_milli(r) for r in wholes])) if wholes else 0.0
    # n * s / (n * s + (count - n) * w) = fraction, for n sharing pods of mean s
    n = round(fraction * count * mean_whole / (mean_share * (1 - fraction) + fraction * mean_whole))
    n = count if fraction >= 1.0 else n
    drawn = _draw(shares, n, rng, replace=True) + _draw(wholes, count - n, rng, replace=True)
    order = rng.permutation(len(drawn))
    slots = iter(drawn[int(i)] for i in order)
    return [next(slots) if gpu_milli(r) else r for r in rows]


def _towards_multi_gpu(rows: list[Row], fraction: float, rng: np.random.Generator) -> list[Row]:
    multi = [r for r in rows if int(r["num_gpu"]) > 1 and gpu_milli(r)]
    total = sum(gpu_milli(r) for r in rows)
    part = sum(gpu_milli(r) for r in multi)
    out = list(rows)
    while multi and part < fraction * total:
        pick = dict(multi[int(rng.integers(len(multi)))])
        out.append(pick)
        part += gpu_milli(pick)
        total += gpu_milli(pick)
    return out


def _with_constraints(
    rows: list[Row],
    fraction: float,
    rng: np.random.Generator,
    constraints: Mapping[Shape, Sequence[tuple[str, int]]],
) -> list[Row]:
    gpu = [i for i, r in enumerate(rows) if gpu_milli(r)]
    target = fraction * sum(gpu_milli(rows[i]) for i in gpu)
    done = 0
    for i in (gpu[int(j)] for j in rng.permutation(len(gpu))):
        if done >= target:
            break
        choices = (
            constraints.get(request(rows[i]))
            or constraints.get(shape(rows[i]))
            or _nearest(constraints, shape(rows[i]))
        )
        specs, weights = zip(*choices, strict=True)
        p = np.array(weights, float) / sum(weights)
        rows[i]["gpu_spec"] = specs[int(rng.choice(len(specs), p=p))]
        done += gpu_milli(rows[i])
    return rows


def _nearest(
    constraints: Mapping[Shape, Sequence[tuple[str, int]]], want: Shape
) -> Sequence[tuple[str, int]]:
    """Constraints of the closest shape with some (a k-GPU pod: the next larger k)."""
    gpus, is_share = want
    shapes = [s for s in constraints if len(s) == 2]
    same_kind = [s for s in shapes if s[1] == is_share] or shapes
    best = min(same_kind, key=lambda s: (s[0] < gpus, abs(s[0] - gpus)))
    return constraints[best]
