"""Packing quality: unallocated GPU % at 100 % and 130 % arrived demand, ours beside
FGD, first-fit, best-fit and random in the same run of the reference evaluator.

    .venv/bin/python bench/packing.py [--traces default,gpushare40,...] [--seeds 42,...]
        [--ties rank,random] [--held-out gpushare80,cpu250,...] [--family-seed 1]
        [--extra-trace PATH.csv ...] [--out results.json]

For each trace and tie mode it runs ../shared/data/fgd_eval.py with the
built-in baselines and our policies through `gpudock scheduler serve-jsonl`
(policy "external", one evaluator run per policy), then prints a Markdown table
of mean ± std over seeds and the ratio to min(FGD, first-fit), the target
being <= 0.8. `--held-out` names members of the trace family that are not
published: each is made from the default trace by `scheduler.family` (seeded
by --family-seed; gpuspec constraints drawn from the published gpuspec10) into
a temporary directory (never into the project), and reported as "NAME*".
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudock.scheduler import family

ROOT = Path(__file__).resolve().parents[1]
EVALUATOR = ROOT.parent / "shared" / "data" / "fgd_eval.py"
DATA = EVALUATOR.parent / "alibaba-gpu-2023"
GPUDOCK = Path(sys.executable).with_name("gpudock")
BASELINES = "fgd,firstfit,bestfit,random"
OURS = ("gpudock", "gpudock-place")
TRACES = "default,gpushare40,multigpu20,gpuspec10,cpu050"
POINTS = (100, 130)


def evaluate(trace: str, policies: str, seeds: str, ties: str, external: str | None) -> list[dict]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            sys.executable,
            str(EVALUATOR),
            "--trace",
            trace,
            "--policies",
            policies,
            "--seeds",
            seeds,
            "--ties",
            ties,
            "--checkpoints",
            "100,130",
            "--out",
            out.name,
        ]
        if external:
            serve = f"{shlex.quote(str(GPUDOCK))} scheduler serve-jsonl --policy {external}"
            cmd += ["--external-cmd", serve]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        runs = json.loads(Path(out.name).read_text())["results"]
    for run in runs:
        if run["policy"] == "external":
            run["policy"] = external
    return runs


def summary(runs: list[dict]) -> dict[str, dict[int, tuple[float, float]]]:
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for policy in dict.fromkeys(r["policy"] for r in runs):
        mine = [r for r in runs if r["policy"] == policy]
        out[policy] = {}
        for x in POINTS:
            values = [100.0 - r["alloc"][str(x)] for r in mine]
            out[policy][x] = (statistics.mean(values), statistics.pstdev(values))
    return out


def table_rows(
    trace: str, ties: str, table: dict[str, dict[int, tuple[float, float]]]
) -> list[str]:
    rows = []
    for x in POINTS:
        ref = min(table["fgd"][x][0], table["firstfit"][x][0])
        cells = [
            f"{table[p][x][0]:.2f} ± {table[p][x][1]:.2f}" for p in (*OURS, *BASELINES.split(","))
        ]
        ratio = table["gpudock"][x][0] / ref if ref else float("nan")
        rows.append(f"| {trace} | {ties} | {x} % | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return rows


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def held_out(names: list[str], seed: int, directory: Path) -> list[str]:
    """Write each family member `names` made from the default trace; their paths."""
    rows = read(DATA / "openb_pod_list_default.csv")
    constraints = family.constraint_choices(read(DATA / "openb_pod_list_gpuspec10.csv"))
    paths = []
    for name in names:
        path = directory / f"openb_pod_list_{name}_heldout.csv"
        new = family.resample(rows, name, seed, constraints)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]))
            writer.writeheader()
            writer.writerows(new)
        paths.append(str(path))
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=TRACES)
    ap.add_argument("--extra-trace", action="append", default=[], help="a pod-list CSV")
    ap.add_argument("--held-out", default="", help="family members to make, e.g. gpushare80")
    ap.add_argument("--family-seed", type=int, default=1)
    ap.add_argument("--seeds", default="42,43,44,45,46")
    ap.add_argument("--ties", default="rank,random")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    scratch = tempfile.TemporaryDirectory()
    names = [n for n in a.held_out.split(",") if n]
    made = held_out(names, a.family_seed, Path(scratch.name))
    traces = [t for t in a.traces.split(",") if t] + a.extra_trace + made
    header = (
        "| trace | ties | arrived | "
        + " | ".join((*OURS, *BASELINES.split(",")))
        + " | ours / min(FGD, FF) |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    everything = []
    for trace in traces:
        for ties in a.ties.split(","):
            runs = evaluate(trace, BASELINES, a.seeds, ties, None)
            for policy in OURS:
                runs += evaluate(trace, "external", a.seeds, ties, policy)
            name = Path(trace).stem.removeprefix("openb_pod_list_").replace("_heldout", "*")
            for row in table_rows(name, ties, summary(runs)):
                print(row, flush=True)
            everything.append({"trace": name, "ties": ties, "runs": runs})
    if a.out:
        Path(a.out).write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
