"""`gpudock billing ...` (your balance and statements) and `gpudock admin ...`
(prices and top-ups). Amounts are decimal strings, passed to the server as typed."""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import typer

from gpudock.cli import output
from gpudock.cli.client import ApiClient, connect

app = typer.Typer(help="Your balance, ledger and usage.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration: prices and top-ups (admin).", no_args_is_help=True)
prices_app = typer.Typer(help="Prices per GPU-hour, no-GPU hour and GB-day.", no_args_is_help=True)
admin_app.add_typer(prices_app, name="prices")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
CsvFlag = Annotated[bool, typer.Option("--csv", help="Print CSV (for spreadsheets).")]
UserOpt = Annotated[
    str | None, typer.Option("--user", metavar="USER", help="Admins: another user's statement.")
]
FromOpt = Annotated[
    str | None, typer.Option("--from", metavar="TIME", help="From (inclusive), ISO 8601.")
]
ToOpt = Annotated[
    str | None, typer.Option("--to", metavar="TIME", help="To (exclusive), ISO 8601.")
]
MAX_PAGES = 1000


def _params(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


def _money(amount: str | None, currency: str) -> str:
    return output.NONE if amount is None else f"{amount} {currency}"


# -- gpudock billing ------------------------------------------------------------------------
@app.command("balance")
def balance(user: UserOpt = None, json_output: JsonFlag = False) -> None:
    """Balance, what is accruing now, burn rate, runway and monthly budget."""
    with connect() as client:
        data = client.request("GET", "/billing/balance", params=_params(user=user))
    if json_output:
        output.print_json(data)
        return
    cur = data["currency"]
    runway = data["runway_seconds"]
    rows = [
        ("Balance", _money(data["balance"], cur)),
        ("Accruing, not posted", _money(data["unposted"], cur)),
        ("Available", _money(data["available"], cur)),
        ("Burn rate", f"{data['burn_per_hour']} {cur}/h"),
        ("Runway", output.NONE if runway is None else _duration(runway)),
        ("Monthly budget", _money(data["monthly_budget"], cur)),
        ("Spent this month", _money(data["month_spent"], cur)),
    ]
    grid = output.table("", "", title=f"{data['user_name']} [{data['user_id']}]")
    output.add_rows(grid, rows)
    output.show(grid)


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


@app.command("ledger")
def ledger(
    start: FromOpt = None,
    end: ToOpt = None,
    user: UserOpt = None,
    csv_output: CsvFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Every posting: top-ups, charges per period, refunds; each line explains itself."""
    params = _params(**{"from": start, "to": end, "user": user})
    with connect() as client:
        if csv_output:
            typer.echo(client.get_text("/billing/ledger.csv", params), nl=False)
            return
        currency, lines = _all_lines(client, params)
    if json_output:
        output.print_json({"currency": currency, "lines": lines})
        return
    if not lines:
        output.print_message("No postings in this range.")
        return
    grid = output.table(
        "AT", "KIND", "AMOUNT", "INSTANCE", "GPUS", "FROM", "TO", "SECONDS", "RATE", "DETAIL"
    )
    output.add_rows(grid, (_line_row(line, currency) for line in lines))
    output.show(grid)


def _all_lines(client: ApiClient, params: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []
    cursor: int | None = None
    currency = ""
    for _ in range(MAX_PAGES):
        page_params = {**params, "limit": "1000", **_params(cursor=_str(cursor))}
        page = client.request("GET", "/billing/ledger", params=page_params)
        currency = page["currency"]
        lines.extend(page["lines"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return currency, lines


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)


def _line_row(line: dict[str, Any], currency: str) -> list[str]:
    instance = line["instance_name"] or line["instance_id"]
    gpus = output.gpus(line["gpu_model"], line["gpu_count"]) if line["instance_id"] else ""
    unit = {"per hour": "/h", "per day": "/day"}.get(line["rate_unit"] or "", "")
    return [
        output.when(line["at"]),
        line["kind"],
        f"{line['amount']} {currency}",
        output.text(instance),
        gpus,
        output.when(line["from"]) if line["from"] else "",
        output.when(line["to"]) if line["to"] else "",
        str(line["seconds"]) if line["instance_id"] else "",
        f"{line['rate']}{unit}" if line["rate"] else "",
        line["description"],
    ]


@app.command("usage")
def usage(
    start: FromOpt = None,
    end: ToOpt = None,
    user: UserOpt = None,
    csv_output: CsvFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Per instance: billed seconds, GPU-seconds, stopped-disk seconds and amounts."""
    params = _params(**{"from": start, "to": end, "user": user})
    with connect() as client:
        if csv_output:
            typer.echo(client.get_text("/billing/usage.csv", params), nl=False)
            return
        data = client.request("GET", "/billing/usage", params=params)
    if json_output:
        output.print_json(data)
        return
    cur = data["currency"]
    grid = output.table(
        "INSTANCE", "GPUS", "SECONDS", "GPU-SECONDS", "COMPUTE", "DISK SECONDS", "DISK", "TOTAL"
    )
    for u in data["instances"]:
        grid.add_row(
            output.text(u["instance_name"] or u["instance_id"]),
            output.gpus(u["gpu_model"], u["gpu_count"]),
            str(u["seconds"]),
            str(u["gpu_seconds"]),
            f"{u['compute_amount']} {cur}",
            str(u["storage_seconds"]),
            f"{u['storage_amount']} {cur}",
            f"{u['amount']} {cur}",
        )
    output.show(grid)
    output.print_message(f"Total: {data['total']} {cur}")


@app.command("budget")
def budget(
    amount: Annotated[
        str | None, typer.Argument(metavar="AMOUNT", help="Monthly budget, e.g. 500.")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the budget.")] = False,
    user: UserOpt = None,
    json_output: JsonFlag = False,
) -> None:
    """Set a monthly budget: running instances stop (data kept) when it is spent."""
    if (amount is None) == (not clear):
        raise typer.BadParameter("give an AMOUNT, or --clear to remove the budget")
    with connect() as client:
        data = client.request(
            "PUT", "/billing/budget", {"monthly": amount}, params=_params(user=user)
        )
    if json_output:
        output.print_json(data)
        return
    cur = data["currency"]
    if data["monthly_budget"] is None:
        output.print_message(f"No monthly budget for {data['user_name']}.")
    else:
        output.print_message(
            f"Monthly budget for {data['user_name']}: {data['monthly_budget']} {cur} "
            f"(spent this month: {data['month_spent']} {cur})."
        )


@app.command("prices")
def list_prices(json_output: JsonFlag = False) -> None:
    """What things cost: per GPU-hour, per no-GPU hour, per GB-day of a stopped disk."""
    with connect() as client:
        data = client.get("/prices")
    if json_output:
        output.print_json(data)
        return
    if not data["prices"]:
        output.print_message("No prices set: everything is free here.")
        return
    grid = output.table("WHAT", "PRICE", "UNIT", "SINCE")
    for p in data["prices"]:
        what = p["gpu_model"] or {"no_gpu": "no-GPU instance", "disk": "stopped disk"}[p["kind"]]
        grid.add_row(
            what, f"{p['amount']} {p['currency']}", p["unit"], output.when(p["updated_at"])
        )
    output.show(grid)


# -- gpudock admin ---------------------------------------------------------------------------
prices_app.command("list")(list_prices)


@prices_app.command("set")
def set_price(
    target: Annotated[
        str, typer.Argument(metavar="MODEL", help="GPU model (or the amount with a flag).")
    ],
    amount: Annotated[str | None, typer.Argument(metavar="AMOUNT", help="e.g. 3.6")] = None,
    no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Price per no-GPU hour.")] = False,
    disk: Annotated[
        bool, typer.Option("--disk-gb-day", help="Price per GB-day of a stopped disk.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """`set MODEL AMOUNT` per GPU-hour; `set --no-gpu AMOUNT`; `set --disk-gb-day AMOUNT`."""
    if no_gpu and disk:
        raise typer.BadParameter("give --no-gpu or --disk-gb-day, not both")
    if no_gpu or disk:
        if amount is not None:
            raise typer.BadParameter("with --no-gpu or --disk-gb-day, give only the AMOUNT")
        body: dict[str, Any] = {"kind": "no_gpu" if no_gpu else "disk", "amount": target}
    else:
        if amount is None:
            raise typer.BadParameter("give MODEL AMOUNT, e.g. `set A100-80GB 3.6`")
        body = {"kind": "gpu", "gpu_model": target, "amount": amount}
    with connect() as client:
        price = client.request("PUT", "/admin/prices", body)
    if json_output:
        output.print_json(price)
        return
    what = (
        price["gpu_model"]
        or {"no_gpu": "a no-GPU instance", "disk": "a stopped disk"}[price["kind"]]
    )
    output.print_message(
        f"Price for {what}: {price['amount']} {price['currency']} {price['unit']} "
        "(running instances keep the price they started at)."
    )


@admin_app.command("topup")
def topup(
    user: Annotated[str, typer.Argument(metavar="USER", help="User name or id.")],
    amount: Annotated[str, typer.Argument(metavar="AMOUNT", help="e.g. 100 or 12.5")],
    note: Annotated[str, typer.Option(help="A note on the ledger line.")] = "",
    key: Annotated[
        str | None,
        typer.Option(metavar="KEY", help="Idempotency key: rerunning with it never pays twice."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Add money to a user's balance."""
    idempotency_key = key or "cli-" + secrets.token_hex(12)
    with connect() as client:
        done = client.request(
            "POST",
            "/admin/topups",
            {"user": user, "amount": amount, "note": note},
            headers={"Idempotency-Key": idempotency_key},
        )
    if json_output:
        output.print_json(done)
        return
    cur = done["currency"]
    again = " (already done earlier with this key; nothing added)" if done["replayed"] else ""
    output.print_message(
        f"Topped up {done['user_name']} by {done['amount']} {cur}; balance "
        f"{done['balance']} {cur}{again}."
    )
    output.print_note(f"idempotency key: {idempotency_key}")
