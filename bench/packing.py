"""Packing quality: unallocated GPU % at 100 % and 130 % arrived demand, ours beside
FGD, first-fit, best-fit and random in the same run of the reference evaluator.

    .venv/bin/python bench/packing.py [--traces default,gpushare40,...] [--seeds 42,...]
        [--ties rank,random] [--held-out gpushare80,cpu250,...] [--family-seed 1]
        [--extra-trace PATH.csv ...] [--out results.json] [--in-process --jobs 2]

For each trace and tie mode it runs ../shared/data/fgd_eval.py with the
built-in baselines and our policies through `gpudock scheduler serve-jsonl`
(policy "external", one evaluator run per policy), then prints a Markdown table
of mean ± std over seeds and the ratio to min(FGD, first-fit), the target
being <= 0.8. `--held-out` names members of the trace family that are not
published: each is made from the default trace by `scheduler.family` (seeded
by --family-seed; gpuspec constraints drawn from the published gpuspec10) into
a temporary directory (never into the project), and reported as "NAME*".

`--in-process` replays every policy through `scheduler.replay` (the same
method and seeded sequence as the evaluator, without its pipe: several times
faster; `--policies` picks which, fgd and firstfit being needed for the ratio).
The evaluator's runs and these agree exactly for our policies, fgd and
first-fit (`tests/scheduler/test_jsonl.py` checks it on a small trace).
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpudock.scheduler import family
from gpudock.scheduler.replay import replay
from gpudock.scheduler.trace import parse_nodes, parse_pods

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


def replay_run(trace: str, policy: str, seed: int, ties: str) -> dict:
    """One run in this process, in the evaluator's result format."""
    nodes = parse_nodes(read(DATA / "openb_node_list_gpu_node.csv"))
    path = Path(trace) if trace.endswith(".csv") else DATA / f"openb_pod_list_{trace}.csv"
    result = replay(nodes, parse_pods(read(path)), policy, seed=seed, ties=ties, checkpoints=POINTS)
    alloc = {str(x): result.allocated_pct[x] for x in POINTS}
    return {"policy": policy, "seed": seed, "ties": ties, "alloc": alloc}


def evaluate_in_process(
    trace: str, policies: list[str], seeds: str, ties: str, jobs: int
) -> list[dict]:
    runs = [(trace, p, int(s), ties) for p in policies for s in seeds.split(",")]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(replay_run, *zip(*runs, strict=True)))


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
        refs = [table[p][x][0] for p in ("fgd", "firstfit") if p in table]
        ref = min(refs) if len(refs) == 2 else 0.0
        cells = [
            f"{table[p][x][0]:.2f} ± {table[p][x][1]:.2f}" if p in table else "–"
            for p in (*OURS, *BASELINES.split(","))
        ]
        ratio = table["gpudock"][x][0] / ref if ref and "gpudock" in table else float("nan")
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
    ap.add_argument("--in-process", action="store_true", help="replay here, not via the evaluator")
    ap.add_argument("--policies", default=",".join((*OURS, *BASELINES.split(","))))
    ap.add_argument("--jobs", type=int, default=1, help="parallel runs with --in-process")
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
            if a.in_process:
                runs = evaluate_in_process(trace, a.policies.split(","), a.seeds, ties, a.jobs)
            else:
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
