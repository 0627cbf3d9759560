"""Billing for users: balance, spending chart, usage per instance, ledger, CSV, budget."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import StreamingResponse

from gpudock.billing.money import format_amount, format_cents, parse_amount
from gpudock.errors import InvalidRequest
from gpudock.services.accounts.logins import WebSession
from gpudock.services.billing import balances as billing
from gpudock.services.billing import statements
from gpudock.services.context import ServiceContext
from gpudock.web import charts
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
PERIODS = (7, 30, 90)
LEDGER_LINES = 50
USAGE_BARS = 12


def _days(days: int) -> int:
    return days if days in PERIODS else 30


def _since(ctx: ServiceContext, days: int) -> datetime:
    today = ctx.clock().replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days - 1)


def _values(ctx: ServiceContext, viewer: WebSession, days: int) -> dict[str, Any]:
    user = viewer.user
    spend = statements.daily_spend(ctx, user, days)
    usage = statements.usage(ctx, user, _since(ctx, days), None)
    top = sorted(usage, key=lambda u: u.amount, reverse=True)[:USAGE_BARS]
    return {
        "summary": billing.summary(ctx, user),
        "money": format_amount,
        "currency": ctx.settings.currency,
        "prices": billing.list_prices(ctx),
        "units": billing.PRICE_UNITS,
        "days": days,
        "periods": PERIODS,
        "spend_chart": charts.bar_chart(
            [(d.day.strftime("%m-%d"), d.amount) for d in spend],
            format_cents,
            every=max(1, days // 10),
        ),
        "usage": usage,
        "usage_chart": charts.bar_chart(
            [(u.instance_name or u.instance_id, u.amount) for u in top], format_cents
        ),
        "lines": statements.latest_lines(ctx, user, LEDGER_LINES),
        "budget_error": None,
    }


@router.get("/billing")
def billing_page(request: Request, ctx: Context, viewer: Viewer, days: int = 30) -> Response:
    return render(request, "billing.html", viewer, **_values(ctx, viewer, _days(days)))


def _csv_response(name: str, rows: Iterator[str]) -> Response:
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
    return StreamingResponse(rows, media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/billing/ledger.csv")
def ledger_csv(ctx: Context, viewer: Viewer, days: int = 30) -> Response:
    lines = statements.all_lines(ctx, viewer.user, _since(ctx, _days(days)), None)
    return _csv_response("gpudock-ledger.csv", statements.ledger_csv(lines, ctx.settings.currency))


@router.get("/billing/usage.csv")
def usage_csv(ctx: Context, viewer: Viewer, days: int = 30) -> Response:
    usage = statements.usage(ctx, viewer.user, _since(ctx, _days(days)), None)
    return _csv_response("gpudock-usage.csv", statements.usage_csv(usage, ctx.settings.currency))


@router.post("/billing/budget")
def set_budget(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    monthly: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """An empty amount clears the budget."""
    try:
        amount = parse_amount(monthly, field="monthly") if monthly.strip() else None
    except InvalidRequest as exc:
        values = _values(ctx, viewer, 30) | {"budget_error": exc.message}
        return render(request, "billing.html", viewer, 422, **values)
    billing.set_budget(ctx, viewer.user, amount)
    return redirect("/billing")
