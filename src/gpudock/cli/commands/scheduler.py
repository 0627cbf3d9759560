"""`gpudock scheduler replay | serve-jsonl | resample`: the placement core run locally,
no server.

These commands import the pure core directly (the one exception to "the CLI
talks to the server only over HTTP"): a replay or an evaluator must drive the
very code the server places with, and needs no server to do it. They import it
when they run, not when the CLI starts: the core brings numpy, which alone would
double the time `gpudock --help` takes. So the policies' names, which the help
shows, are written here too; a test keeps them equal to the core's registry.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpudock.cli import output
from gpudock.cli.client import CliError

if TYPE_CHECKING:
    from gpudock.scheduler.replay import ReplayResult
    from gpudock.scheduler.snapshot import NodeSpec
    from gpudock.scheduler.trace import TracePod

app = typer.Typer(help="Run the placement core locally: trace replays and evaluator plug-in.")

POLICY_NAMES = ("gpudock", "gpudock-place", "fgd", "firstfit", "bestfit", "random")
DEFAULT_POLICY = "gpudock"
PolicyOption = Annotated[str, typer.Option("--policy", help=f"One of {', '.join(POLICY_NAMES)}.")]


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", exit_code=2) from exc


def _check_policy(name: str) -> None:
    if name not in POLICY_NAMES:
        known = ", ".join(POLICY_NAMES)
        raise CliError(f"unknown policy {name!r}", exit_code=2, hint=f"choose from {known}")


@app.command("replay")
def replay_command(
    nodes: Annotated[Path, typer.Option("--nodes", help="Node list CSV (openb format).")],
    pods: Annotated[Path, typer.Option("--pods", help="Pod list CSV (openb format).")],
    policy: PolicyOption = DEFAULT_POLICY,
    seed: Annotated[int, typer.Option("--seed")] = 42,
    ties: Annotated[str, typer.Option("--ties", help="rank (seeded node order) or random.")] = (
        "rank"
    ),
    tune: Annotated[float, typer.Option("--tune", help="Arrived demand, x capacity.")] = 1.3,
    churn: Annotated[
        bool, typer.Option("--churn", help="Pods leave at their deletion time; a queue waits.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Replay a trace and print the allocation curve (or, with --churn, the churn report)."""
    from gpudock.scheduler.replay import DEFAULT_CHECKPOINTS, replay
    from gpudock.scheduler.trace import parse_nodes, parse_pods

    _check_policy(policy)
    if ties not in ("rank", "random"):
        raise CliError("--ties is rank or random", exit_code=2)
    node_specs = parse_nodes(_read(nodes))
    trace = parse_pods(_read(pods))
    if churn:
        _print_churn(node_specs, trace, policy, seed, json_output)
        return
    result = replay(
        node_specs, trace, policy, seed=seed, ties=ties, tune=tune, clock_ns=time.perf_counter_ns
    )
    times = sorted(result.decision_ns)
    summary = {
        "policy": policy,
        "seed": seed,
        "ties": ties,
        "pods": result.pods,
        "failed_pods": result.failed_pods,
        "failed_gpus": result.failed_gpus,
        "allocated_pct": result.allocated_pct,
        "unallocated_pct": {x: result.unallocated_pct(x) for x in DEFAULT_CHECKPOINTS},
        "decision_us_p50": _percentile_us(times, 0.50),
        "decision_us_p99": _percentile_us(times, 0.99),
    }
    if json_output:
        output.print_json(summary)
    else:
        _print_curve(result, DEFAULT_CHECKPOINTS, summary)


def _print_curve(result: ReplayResult, checkpoints: Sequence[int], summary: dict[str, Any]) -> None:
    grid = output.table("ARRIVED %", "ALLOCATED %", "UNALLOCATED %")
    for x in checkpoints:
        allocated = result.allocated_pct[x]
        grid.add_row(
            str(x),
            output.NONE if allocated is None else f"{allocated:.2f}",
            output.NONE if allocated is None else f"{100 - allocated:.2f}",
        )
    output.show(grid)
    output.print_message(
        f"{result.policy}, seed {result.seed}, ties {result.ties}: {result.pods} pods, "
        f"{result.failed_pods} failed; "
        f"decision p50 {summary['decision_us_p50']} µs, p99 {summary['decision_us_p99']} µs"
    )


def _percentile_us(sorted_ns: list[int], q: float) -> float | None:
    if not sorted_ns:
        return None
    return round(sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0, 1)


def _print_churn(
    nodes: list[NodeSpec], trace: list[TracePod], policy: str, seed: int, json_output: bool
) -> None:
    from gpudock.scheduler.churn import churn_replay

    reports = [churn_replay(nodes, trace, name, seed=seed) for name in _churn_policies(policy)]
    if json_output:
        output.print_json([r.as_json() for r in reports])
        return
    grid = output.table("POLICY", "GPU-HOURS %", "WAIT", "P50/P99 BY SIZE (s)", "LONGEST (s)")
    for r in reports:
        waits = "  ".join(f"{size}: {p50:.0f}/{p99:.0f}" for size, (p50, p99) in r.wait_s.items())
        grid.add_row(
            r.policy, f"{r.gpu_hours_pct:.2f}", str(r.waited), waits, f"{r.longest_wait_s:.0f}"
        )
    output.show(grid)


def _churn_policies(policy: str) -> list[str]:
    """Ours against FGD and first-fit in the same run, as the issue asks."""
    return [policy] + [p for p in ("fgd", "firstfit") if p != policy]


@app.command("resample")
def resample_command(
    pods: Annotated[Path, typer.Option("--pods", help="The default pod list CSV (openb).")],
    towards: Annotated[
        str, typer.Option("--towards", help="A family name: cpu050, gpushare80, gpuspec33, ...")
    ],
    out: Annotated[Path, typer.Option("--out", help="Where to write the new pod list CSV.")],
    seed: Annotated[int, typer.Option("--seed")] = 1,
    constraints_from: Annotated[
        Path | None,
        typer.Option("--constraints-from", help="A gpuspec trace whose constraints to draw."),
    ] = None,
) -> None:
    """Resample the default trace towards one kind of workload (a held-out family member)."""
    from gpudock.scheduler import family

    try:
        kind, _ = family.parse_name(towards)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from exc
    if kind == "gpuspec" and constraints_from is None:
        raise CliError("gpuspec traces need --constraints-from", exit_code=2)
    rows = _read(pods)
    choices = family.constraint_choices(_read(constraints_from)) if constraints_from else None
    new = family.resample(rows, towards, seed, choices)
    try:
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]) if rows else ["name"])
            writer.writeheader()
            writer.writerows(new)
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror}", exit_code=2) from exc
    output.print_message(f"{towards}: {len(new)} pods written to {out}")


@app.command("serve-jsonl")
def serve_jsonl(policy: PolicyOption = DEFAULT_POLICY) -> None:
    """Speak fgd-eval/1 on stdin/stdout, so any evaluator can drive this core."""
    from gpudock.scheduler import jsonl

    _check_policy(policy)

    def send(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    jsonl.serve(sys.stdin, send, policy)
