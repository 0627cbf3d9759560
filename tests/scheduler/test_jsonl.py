"""serve-jsonl end to end: the reference evaluator drives `gpudock scheduler
serve-jsonl` over a small trace and gets the numbers of its own built-in policy."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpudock.scheduler import jsonl
from gpudock.scheduler.replay import replay
from gpudock.scheduler.trace import parse_nodes, parse_pods
from tests.scheduler.small_trace import write_small_trace

REPO = Path(__file__).resolve().parents[2]
EVALUATOR = REPO.parent / "shared" / "data" / "fgd_eval.py"
GPUDOCK = Path(sys.executable).with_name("gpudock")


def evaluate(tmp_path: Path, policies: str, external: str) -> dict[str, list[dict]]:
    nodes, pods = write_small_trace(tmp_path)
    out = tmp_path / "result.json"
    cmd = f"{shlex.quote(str(GPUDOCK))} scheduler serve-jsonl --policy {external}"
    subprocess.run(
        [
            sys.executable,
            str(EVALUATOR),
            "--data-dir",
            str(tmp_path),
            "--nodes",
            str(nodes),
            "--trace",
            str(pods),
            "--policies",
            policies,
            "--external-cmd",
            cmd,
            "--seeds",
            "1,2",
            "--checkpoints",
            "50,100,130",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    by_policy: dict[str, list[dict]] = {}
    for run in json.loads(out.read_text())["results"]:
        by_policy.setdefault(run["policy"], []).append(run)
    return by_policy


@pytest.fixture
def evaluator() -> Path:
    if not EVALUATOR.exists():
        pytest.fail(f"the reference evaluator is missing at {EVALUATOR}")
    return EVALUATOR


@pytest.mark.parametrize("policy", ["firstfit", "fgd"])
def test_evaluator_gets_the_builtin_numbers_through_serve_jsonl(
    evaluator: Path, tmp_path: Path, policy: str
) -> None:
    runs = evaluate(tmp_path, f"{policy},external", policy)
    assert all(r["invalid"] == 0 for r in runs["external"])
    assert [r["alloc"] for r in runs["external"]] == [r["alloc"] for r in runs[policy]]


def test_house_policy_makes_only_valid_placements(evaluator: Path, tmp_path: Path) -> None:
    runs = evaluate(tmp_path, "external", "gpudock")
    assert all(r["invalid"] == 0 for r in runs["external"])
    assert all(r["final_alloc"] > 0 for r in runs["external"])


def test_protocol_in_memory() -> None:
    init = {
        "type": "init",
        "protocol": "fgd-eval/1",
        "seed": 1,
        "milli_per_gpu": 1000,
        "nodes": [
            {
                "id": 0,
                "name": "n0",
                "model": "G2",
                "cpu_milli": 8000,
                "memory_mib": 8192,
                "num_gpu": 2,
            }
        ],
        "workload_distribution": [],
    }
    pod = {
        "type": "pod",
        "seq": 0,
        "updates": [{"id": 0, "cpu_free": 8000, "mem_free": 8192, "gpu_free": [1000, 1000]}],
        "pod": {
            "name": "p",
            "cpu_milli": 1000,
            "memory_mib": 0,
            "num_gpu": 2,
            "gpu_milli": 1000,
            "gpu_spec": "",
        },
    }
    lines = [json.dumps(m) for m in (init, pod, {"type": "end"}, pod)]
    sent: list[str] = []
    jsonl.serve(lines, sent.append, "gpudock")
    assert sent == ['{"ok":true}', '{"node":0,"gpus":[0,1]}']  # nothing after "end"
    with pytest.raises(jsonl.ProtocolError):
        jsonl.serve([json.dumps(pod)], sent.append, "gpudock")


@pytest.mark.parametrize("policy", ["firstfit", "fgd", "gpudock"])
def test_replay_in_process_matches_the_evaluator(
    evaluator: Path, tmp_path: Path, policy: str
) -> None:
    runs = evaluate(tmp_path, "external", policy)["external"]
    nodes_path, pods_path = write_small_trace(tmp_path)
    nodes, pods = parse_nodes(read_rows(nodes_path)), parse_pods(read_rows(pods_path))
    for run in runs:
        here = replay(nodes, pods, policy, seed=run["seed"], checkpoints=(50, 100, 130))
        assert {str(x): v for x, v in here.allocated_pct.items()} == run["alloc"]


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
