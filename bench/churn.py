"""Churn table: pods arrive and leave, a wait queue holds what cannot be placed;
ours against FGD and first-fit in the same run.

    .venv/bin/python bench/churn.py [--seeds 42,43,44] [--policies gpudock,fgd,firstfit]
        [--load 1.0] [--trace default]

Runs `scheduler.churn.churn_replay` (the method is in its docstring: the
evaluation's seeded pod sequence as a Poisson stream offering `load` x
capacity, each pod running for its trace lifetime) on the openb fleet for each
seed and policy, and prints a Markdown table of means over seeds: GPU-hours
allocated as % of capacity x time, requests that waited, still waiting at the
end, queue wait p50 / p99 in seconds by request size (share, 1, 2, 4, 8 GPUs)
and the longest wait (the worst over seeds, with its size).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from gpudock.scheduler.churn import SIZES, ChurnReport, churn_replay
from gpudock.scheduler.trace import parse_nodes, parse_pods

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "alibaba-gpu-2023"


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def row(policy: str, reports: list[ChurnReport]) -> str:
    def mean(values: list[float]) -> float:
        return statistics.mean(values) if values else float("nan")

    cells = [
        f"{mean([r.gpu_hours_pct for r in reports]):.2f}",
        f"{mean([r.waited for r in reports]):.0f}",
        f"{mean([r.still_waiting for r in reports]):.0f}",
    ]
    for size in SIZES:
        waits = [r.wait_s[size] for r in reports if size in r.wait_s]
        cells.append(
            f"{mean([w[0] for w in waits]):.0f} / {mean([w[1] for w in waits]):.0f}"
            if waits
            else "–"
        )
    worst = max(reports, key=lambda r: r.longest_wait_s)
    cells.append(f"{worst.longest_wait_s:.0f} ({worst.longest_wait_size})")
    return f"| {policy} | " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42,43,44")
    ap.add_argument("--policies", default="gpudock,fgd,firstfit")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--trace", default="default")
    a = ap.parse_args()
    nodes = parse_nodes(read(DATA / "openb_node_list_gpu_node.csv"))
    pods = parse_pods(read(DATA / f"openb_pod_list_{a.trace}.csv"))
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"# trace {a.trace}, load {a.load}, seeds {a.seeds}; waits in seconds")
    print(
        "| policy | GPU-hours % | waited | still waiting | "
        + " | ".join(f"{s} p50 / p99" for s in SIZES)
        + " | longest (size) |"
    )
    print("|---|" + "---:|" * (4 + len(SIZES)))
    for policy in a.policies.split(","):
        reports = [churn_replay(nodes, pods, policy, seed=s, load=a.load) for s in seeds]
        print(row(policy, reports), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
