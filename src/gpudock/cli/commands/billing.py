"""`gpudock billing ...` (your balance and statements) and `gpudock admin ...`
(prices and top-ups). Amounts are decimal strings, passed to the server as typed."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.billing_schemas import (
    BalancePublic,
    LedgerLinePublic,
    LedgerPagePublic,
    PricePublic,
    PricesPublic,
    TopupPublic,
    UsagePublic,
    UsageReportPublic,
)
from gpudock.cli import output
from gpudock.cli.client import ApiClient, connect
from gpudock.cli.commands.options import JsonFlag

app = typer.Typer(help="Your balance, ledger and usage.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration: prices and top-ups (admin).", no_args_is_help=True)
prices_app = typer.Typer(help="Prices per GPU-hour, no-GPU hour and GB-day.", no_args_is_help=True)
admin_app.add_typer(prices_app, name="prices")

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
PAGE_SIZE = "1000"
LEDGER_COLUMNS = (
    "AT", "KIND", "AMOUNT", "INSTANCE", "GPUS", "FROM", "TO", "SECONDS", "RATE", "DETAIL",
)  # fmt: skip
USAGE_COLUMNS = (
    "INSTANCE", "GPUS", "SECONDS", "GPU-SECONDS", "COMPUTE", "DISK SECONDS", "DISK", "TOTAL",
)  # fmt: skip
PRICE_COLUMNS = ("WHAT", "PRICE", "UNIT", "SINCE")
PRICED = {"no_gpu": "no-GPU instance", "disk": "stopped disk"}
RATE_UNITS = {"per hour": "/h", "per day": "/day"}


def _params(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


def _money(amount: str | None, currency: str) -> str:
    return output.NONE if amount is None else f"{amount} {currency}"


StatementPrinter = Callable[[ApiClient, dict[str, str], bool], None]


def statement(name: str) -> Callable[[StatementPrinter], StatementPrinter]:
    """Register `gpudock billing NAME`, a statement over --from/--to (and --user).

    With --csv it prints the server's `/billing/NAME.csv` as it came; otherwise the
    decorated function is given the client, the range's query parameters and --json.
    """

    def register(print_statement: StatementPrinter) -> StatementPrinter:
        @app.command(name, help=print_statement.__doc__)
        def command(
            start: FromOpt = None,
            end: ToOpt = None,
            user: UserOpt = None,
            csv_output: CsvFlag = False,
            json_output: JsonFlag = False,
        ) -> None:
            params = _params(**{"from": start, "to": end, "user": user})
            with connect() as client:
                if csv_output:
                    # the CSV ends with its own newline
                    typer.echo(client.get_text(f"/billing/{name}.csv", params), nl=False)
                    return
                print_statement(client, params, json_output)

        return print_statement

    return register


# -- gpudock billing ------------------------------------------------------------------------
@app.command("balance")
def balance(user: UserOpt = None, json_output: JsonFlag = False) -> None:
    """Balance, what is accruing now, burn rate, runway and monthly budget."""
    with connect() as client:
        found = client.get("/billing/balance", BalancePublic, params=_params(user=user))
    if json_output:
        output.print_json(found)
        return
    cur = found.currency
    runway = found.runway_seconds
    rows = [
        ("Balance", _money(found.balance, cur)),
        ("Accruing, not posted", _money(found.unposted, cur)),
        ("Available", _money(found.available, cur)),
        ("Burn rate", f"{found.burn_per_hour} {cur}/h"),
        ("Runway", output.NONE if runway is None else _duration(runway)),
        ("Monthly budget", _money(found.monthly_budget, cur)),
        ("Spent this month", _money(found.month_spent, cur)),
    ]
    grid = output.table("", "", title=f"{found.user_name} [{found.user_id}]")
    output.add_rows(grid, rows)
    output.show(grid)


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


@statement("ledger")
def ledger(client: ApiClient, params: dict[str, str], json_output: bool) -> None:
    """Every posting: top-ups, charges per period, refunds; each line explains itself."""
    currency, lines = _all_lines(client, params)
    output.print_listing(
        lines,
        LEDGER_COLUMNS,
        lambda line: _line_row(line, currency),
        json_output=json_output,
        answer={"currency": currency, "lines": lines},
        empty="No postings in this range.",
    )


def _all_lines(client: ApiClient, params: dict[str, str]) -> tuple[str, list[LedgerLinePublic]]:
    lines: list[LedgerLinePublic] = []
    cursor: int | None = None
    currency = ""
    for _ in range(MAX_PAGES):
        after = {} if cursor is None else {"cursor": str(cursor)}
        page_params = {**params, "limit": PAGE_SIZE, **after}
        page = client.get("/billing/ledger", LedgerPagePublic, params=page_params)
        currency = page.currency
        lines.extend(page.lines)
        cursor = page.next_cursor
        if cursor is None:
            break
    return currency, lines


def _line_row(line: LedgerLinePublic, currency: str) -> list[str]:
    instance = line.instance_name or line.instance_id
    for_instance = bool(line.instance_id)
    unit = RATE_UNITS.get(line.rate_unit or "", "")
    return [
        output.when(line.at),
        line.kind,
        f"{line.amount} {currency}",
        output.text(instance),
        output.gpus(line.gpu_model, line.gpu_count) if for_instance else "",
        output.when(line.from_at) if line.from_at else "",
        output.when(line.to_at) if line.to_at else "",
        str(line.seconds) if for_instance else "",
        f"{line.rate}{unit}" if line.rate else "",
        line.description,
    ]


@statement("usage")
def usage(client: ApiClient, params: dict[str, str], json_output: bool) -> None:
    """Per instance: billed seconds, GPU-seconds, stopped-disk seconds and amounts."""
    report = client.get("/billing/usage", UsageReportPublic, params=params)
    if json_output:
        output.print_json(report)
        return
    currency = report.currency
    output.print_listing(report.instances, USAGE_COLUMNS, lambda u: _usage_row(u, currency))
    output.print_message(f"Total: {report.total} {currency}")


def _usage_row(u: UsagePublic, currency: str) -> list[str]:
    return [
        output.text(u.instance_name or u.instance_id),
        output.gpus(u.gpu_model, u.gpu_count),
        str(u.seconds),
        str(u.gpu_seconds),
        f"{u.compute_amount} {currency}",
        str(u.storage_seconds),
        f"{u.storage_amount} {currency}",
        f"{u.amount} {currency}",
    ]


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
        found = client.put(
            "/billing/budget", BalancePublic, {"monthly": amount}, params=_params(user=user)
        )
    cur = found.currency
    said = (
        f"No monthly budget for {found.user_name}."
        if found.monthly_budget is None
        else f"Monthly budget for {found.user_name}: {found.monthly_budget} {cur} "
        f"(spent this month: {found.month_spent} {cur})."
    )
    output.print_answer(found, json_output, said)


@app.command("prices")
def list_prices(json_output: JsonFlag = False) -> None:
    """What things cost: per GPU-hour, per no-GPU hour, per GB-day of a stopped disk."""
    with connect() as client:
        found = client.get("/prices", PricesPublic)
    output.print_listing(
        found.prices,
        PRICE_COLUMNS,
        _price_row,
        json_output=json_output,
        answer=found,
        empty="No prices set: everything is free here.",
    )


def _price_row(price: PricePublic) -> list[str | Text]:
    what = price.gpu_model or PRICED[price.kind]
    return [what, f"{price.amount} {price.currency}", price.unit, output.when(price.updated_at)]


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
        body: dict[str, str] = {"kind": "no_gpu" if no_gpu else "disk", "amount": target}
    else:
        if amount is None:
            raise typer.BadParameter("give MODEL AMOUNT, e.g. `set A100-80GB 3.6`")
        body = {"kind": "gpu", "gpu_model": target, "amount": amount}
    with connect() as client:
        price = client.put("/admin/prices", PricePublic, body)
    what = price.gpu_model or f"a {PRICED[price.kind]}"
    said = (
        f"Price for {what}: {price.amount} {price.currency} {price.unit} "
        "(running instances keep the price they started at)."
    )
    output.print_answer(price, json_output, said)


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
            TopupPublic,
            {"user": user, "amount": amount, "note": note},
            headers={"Idempotency-Key": idempotency_key},
        )
    cur = done.currency
    again = " (already done earlier with this key; nothing added)" if done.replayed else ""
    output.print_answer(
        done,
        json_output,
        f"Topped up {done.user_name} by {done.amount} {cur}; balance {done.balance} {cur}{again}.",
        note=f"idempotency key: {idempotency_key}",
    )
