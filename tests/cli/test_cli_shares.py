"""Shares, accepted model sets and the wait queue from the CLI: CliRunner → HTTP
→ a real gpudock server (fake runtime; 1 host × 4 A100-80GB, 1 × 2 RTX4090-24GB).

The shares here use the A100s and the queue the RTX 4090s, so that neither
test depends on what the other left running."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.cli import Invoke

Unique = Callable[[str], str]


def ok_json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def row_of(table: str, first_cell: str) -> list[str]:
    """The cells of the table row that starts with `first_cell`."""
    line = next(line for line in table.splitlines() if line.strip("│ ").startswith(first_cell))
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_shares_by_fraction_and_by_memory(gpudock: Invoke, unique: Unique) -> None:
    quarter = unique("quarter")
    made = ok_json(
        gpudock("instances", "create", "--gpu", "A100-80GB", "--share", "0.25", "--name",
                quarter, "--wait", "--json")
    )  # fmt: skip
    assert (made["gpu_share"], made["gpu_memory_limit_mb"]) == ("0.25", 20 * 1024)
    by_memory = unique("twenty")
    created = gpudock("instances", "create", "--gpu", "A100-80GB", "--share-memory", "20",
                      "--name", by_memory, "--wait")  # fmt: skip
    assert created.exit_code == 0, created.output
    assert f"Created {by_memory}" in created.stdout and "0.25 × A100-80GB" in created.stdout
    shown = gpudock("instances", "show", quarter)
    assert shown.exit_code == 0, shown.output
    assert "0.25 × A100-80GB" in shown.stdout
    assert "0.25 of one GPU · 20480 MiB of GPU memory" in shown.stdout
    assert "Queue" not in shown.stdout  # it runs
    hosts = gpudock("hosts").stdout
    assert f"{made['id']} (0.25)" in hosts


def test_gpus_shows_share_capacity(gpudock: Invoke) -> None:
    models = {m["model"]: m for m in ok_json(gpudock("gpus", "--json"))}
    table = gpudock("gpus").stdout
    assert "SHARE FREE" in table and "LARGEST SHARE" in table
    for model in ("A100-80GB", "RTX4090-24GB"):
        cells = row_of(table, model)
        free, largest = models[model]["share_free_milli"], models[model]["largest_share_milli"]
        assert cells[5:7] == [f"{free / 1000:g}", f"{largest / 1000:g}"], cells


def test_a_waiting_instance_shows_its_place_and_a_model_set_takes_another(
    gpudock: Invoke, unique: Unique
) -> None:
    both = ok_json(
        gpudock("instances", "create", "--gpu", "RTX4090-24GB", "--count", "2", "--name",
                unique("both"), "--wait", "--json")
    )  # fmt: skip
    assert both["status"] == "running"
    waiter = unique("waiter")
    ok_json(gpudock("instances", "create", "--gpu", "RTX4090-24GB", "--name", waiter, "--json"))
    shown = gpudock("instances", "show", waiter)
    assert shown.exit_code == 0, shown.output
    assert "1 of 1 waiting for these GPUs" in shown.stdout
    assert "estimate: unknown" in shown.stdout
    queue = ok_json(gpudock("instances", "show", waiter, "--json"))["queue"]
    assert (queue["position"], queue["waiting"]) == (1, 1)

    either = unique("either")
    placed = ok_json(
        gpudock("instances", "create", "--gpu", "RTX4090-24GB,A100-80GB", "--name", either,
                "--wait", "--json")
    )  # fmt: skip
    assert placed["gpu_model"] == "A100-80GB"  # no 4090 free: the other accepted model
    assert "Accepts" in gpudock("instances", "show", either).stdout
    ok_json(gpudock("instances", "stop", both["id"], "--wait", "--json"))
    ok_json(gpudock("instances", "delete", waiter, "--yes", "--wait", "--json"))


def test_a_bad_share_gets_the_servers_advice(gpudock: Invoke) -> None:
    result = gpudock("instances", "create", "--gpu", "A100-80GB", "--share", "1.5")
    assert result.exit_code == 1
    assert "ask for whole GPUs with gpu_count" in result.stderr
    both = gpudock("instances", "create", "--gpu", "A100-80GB", "--share", "0.5",
                   "--share-memory", "10")  # fmt: skip
    assert both.exit_code == 1 and "not both" in both.stderr


def test_a_model_named_twice_is_a_usage_error(gpudock: Invoke) -> None:
    result = gpudock("instances", "create", "--gpu", "A100-80GB,A100-80GB")
    assert result.exit_code == 2 and "named twice" in result.stderr
