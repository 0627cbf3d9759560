"""`gpudock admin gpus …`, `gpudock admin reliability` and `start --stay` (issue 6)."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.cli import Invoke

DEADLINE_S = 30.0


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _wait_gpus_change(gpudock: Invoke, name: str, old: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        shown = _json(gpudock("instances", "show", name, "--json"))
        if shown["status"] == "running" and shown["gpus"] and shown["gpus"] != old:
            return dict(shown)
        time.sleep(0.1)
    raise AssertionError(f"{name} never moved off {old}: {shown}")


def test_fault_moves_the_tenant_and_the_operator_sees_it_all(gpudock: Invoke) -> None:
    created = _json(
        gpudock(
            "instances", "create", "--gpu", "RTX4090-24GB", "--name", "cuda-job",
            "--wait", "--timeout", "30", "--json",
        )
    )  # fmt: skip
    bad = created["gpus"][0]

    injected = gpudock("admin", "gpus", "fault", bad, "--xid", "48")
    assert injected.exit_code == 0, injected.output
    assert "Xid 48 (double-bit ECC error) → migrate" in injected.stdout
    moved = _wait_gpus_change(gpudock, "cuda-job", [bad])
    assert moved["id"] == created["id"]

    faults = gpudock("admin", "gpus", "faults")
    assert faults.exit_code == 0, faults.output
    assert "double-bit ECC" in faults.stdout and "migrate" in faults.stdout
    report = _json(gpudock("admin", "reliability", "--json"))
    rtx = next(m for m in report["models"] if m["model"] == "RTX4090-24GB")
    assert rtx["failures"] == 1 and rtx["migrations"] == 1
    table = gpudock("admin", "reliability")
    assert table.exit_code == 0 and "RTX4090-24GB" in table.stdout and "xid 48×1" in table.stdout

    repaired = gpudock("admin", "gpus", "repair", bad)
    assert repaired.exit_code == 0 and f"GPU {bad} is healthy" in repaired.stdout


def test_start_stay_waits_for_the_own_host(gpudock: Invoke) -> None:
    created = _json(
        gpudock("instances", "create", "--gpu", "A100-80GB", "--name", "stayer", "--wait", "--json")
    )
    assert _json(gpudock("instances", "stop", "stayer", "--wait", "--json"))["gpus"] == []
    started = _json(gpudock("instances", "start", "stayer", "--stay", "--wait", "--json"))
    assert started["status"] == "running" and started["stay_on_host"] is True
    assert started["host"] == created["host"]


def test_fault_on_an_unknown_gpu_says_where_to_look(gpudock: Invoke) -> None:
    result = gpudock("admin", "gpus", "fault", "GPU-nope", "--xid", "48")
    assert result.exit_code == 1 and "gpudock hosts" in result.output
