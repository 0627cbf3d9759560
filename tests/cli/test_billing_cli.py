"""`gpudock admin prices|topup` and `gpudock billing ...` end to end over HTTP."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tests.support.cli import Invoke


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_admin_sets_prices_and_everyone_sees_them(gpudock: Invoke) -> None:
    done = gpudock("admin", "prices", "set", "A100-80GB", "3.6")
    assert done.exit_code == 0, done.output
    assert "A100-80GB: 3.6 CNY per GPU-hour" in done.stdout
    assert gpudock("admin", "prices", "set", "--no-gpu", "0.5").exit_code == 0
    assert gpudock("admin", "prices", "set", "--disk-gb-day", "0.001").exit_code == 0
    prices = _json(gpudock("billing", "prices", "--json"))["prices"]
    assert {(p["kind"], p["amount"]) for p in prices} >= {("gpu", "3.6"), ("no_gpu", "0.5")}
    models = {m["model"]: m["price_per_hour"] for m in _json(gpudock("gpus", "--json"))}
    assert models["A100-80GB"] == "3.6"
    assert "3.6" in gpudock("gpus").stdout
    table = gpudock("billing", "prices")
    assert "per GB-day" in table.stdout and "stopped disk" in table.stdout


def test_bad_prices_and_amounts_exit_1_with_the_servers_reason(gpudock: Invoke) -> None:
    unknown = gpudock("admin", "prices", "set", "H100-80GB", "3")
    assert unknown.exit_code == 1 and "unknown GPU model 'H100-80GB'" in unknown.stderr
    floaty = gpudock("admin", "prices", "set", "A100-80GB", "3.1234567")
    assert floaty.exit_code == 1 and "6 decimal places" in floaty.stderr
    usage = gpudock("admin", "prices", "set", "A100-80GB")
    assert usage.exit_code == 2
    nobody = gpudock("admin", "topup", "nobody", "5")
    assert nobody.exit_code == 1 and "no user 'nobody'" in nobody.stderr
    word = gpudock("admin", "topup", "admin", "five")
    assert word.exit_code == 1 and "not a decimal number" in word.stderr


def test_topup_with_a_key_never_pays_twice_and_statements_show_it(
    gpudock: Invoke, unique: Any
) -> None:
    name = unique("hana")
    token = _json(gpudock("users", "create", name, "--json"))["token"]
    first = gpudock("admin", "topup", name, "100", "--key", f"{name}-inv-1", "--note", "invoice 1")
    assert first.exit_code == 0, first.output
    assert f"Topped up {name} by 100 CNY; balance 100 CNY." in first.stdout
    again = gpudock("admin", "topup", name, "100", "--key", f"{name}-inv-1", "--note", "invoice 1")
    assert again.exit_code == 0 and "nothing added" in again.stdout
    balance = _json(gpudock("billing", "balance", "--json", token=token))
    assert balance["balance"] == "100" and balance["user_name"] == name
    assert "Balance" in gpudock("billing", "balance", token=token).stdout

    ledger = gpudock("billing", "ledger", "--csv", token=token)
    assert ledger.exit_code == 0, ledger.output
    [row] = list(csv.DictReader(io.StringIO(ledger.stdout)))
    assert (row["kind"], row["amount"], row["description"]) == ("topup", "100", "invoice 1")
    lines = _json(gpudock("billing", "ledger", "--json", token=token))["lines"]
    assert [line["amount"] for line in lines] == ["100"]
    assert "invoice 1" in gpudock("billing", "ledger", token=token).stdout
    assert _json(gpudock("billing", "usage", "--json", token=token))["instances"] == []
    assert gpudock("billing", "usage", "--csv", token=token).stdout.startswith("instance_id,")

    budget = gpudock("billing", "budget", "50", token=token)
    assert budget.exit_code == 0 and "50 CNY" in budget.stdout
    assert "No monthly budget" in gpudock("billing", "budget", "--clear", token=token).stdout
    other = gpudock("billing", "ledger", "--user", "admin", token=token)
    assert other.exit_code == 1 and "your own statements" in other.stderr
