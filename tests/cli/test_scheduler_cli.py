"""`gpudock scheduler replay`: local, no server."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from gpudock.cli.commands import scheduler as scheduler_command
from gpudock.cli.main import app
from gpudock.scheduler import registry
from tests.scheduler.small_trace import write_small_trace


def test_replay_prints_the_allocation_curve_as_json(tmp_path: Path) -> None:
    nodes, pods = write_small_trace(tmp_path)
    args = ["scheduler", "replay", "--nodes", str(nodes), "--pods", str(pods), "--json"]
    result = CliRunner().invoke(app, [*args, "--policy", "firstfit", "--seed", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["policy"] == "firstfit" and report["pods"] > 0
    assert 0 < report["allocated_pct"]["100"] <= 100
    assert report["unallocated_pct"]["100"] == round(100 - report["allocated_pct"]["100"], 2)


def test_churn_replay_compares_with_fgd_and_firstfit(tmp_path: Path) -> None:
    nodes, pods = write_small_trace(tmp_path)
    args = ["scheduler", "replay", "--nodes", str(nodes), "--pods", str(pods), "--churn"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert [r["policy"] for r in reports] == ["gpudock", "fgd", "firstfit"]
    for r in reports:
        assert 0 < r["gpu_hours_pct"] <= 100


def test_unknown_policy_is_a_usage_error(tmp_path: Path) -> None:
    nodes, pods = write_small_trace(tmp_path)
    args = ["scheduler", "replay", "--nodes", str(nodes), "--pods", str(pods)]
    result = CliRunner().invoke(app, [*args, "--policy", "magic"])
    assert result.exit_code == 2


def test_the_help_names_the_policies_the_core_has() -> None:
    """The CLI writes the names down so as not to import the core at start."""
    assert scheduler_command.POLICY_NAMES == registry.POLICY_NAMES
    assert scheduler_command.DEFAULT_POLICY == registry.DEFAULT_POLICY


def test_resample_writes_a_family_member(tmp_path: Path) -> None:
    _, pods = write_small_trace(tmp_path, pods=200)
    out = tmp_path / "openb_pod_list_cpu0.csv"
    args = ["scheduler", "resample", "--pods", str(pods), "--towards", "cpu0", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(int(r["num_gpu"]) > 0 for r in rows)
    assert "creation_time" in rows[0]


def test_resample_refuses_what_it_cannot_make(tmp_path: Path) -> None:
    _, pods = write_small_trace(tmp_path)
    base = ["scheduler", "resample", "--pods", str(pods), "--out", str(tmp_path / "x.csv")]
    assert CliRunner().invoke(app, [*base, "--towards", "gpuspec20"]).exit_code == 2
    assert CliRunner().invoke(app, [*base, "--towards", "everything"]).exit_code == 2
