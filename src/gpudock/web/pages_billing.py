"""Billing, read-only (issue 4 owns the service): balance, budget, prices."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpudock.billing.money import format_amount
from gpudock.services import billing
from gpudock.web.deps import ConsoleRoute, Context, Viewer, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/billing")
def billing_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    summary = billing.summary(ctx, viewer.user)
    return render(
        request,
        "billing.html",
        viewer,
        summary=summary,
        money=format_amount,
        currency=ctx.settings.currency,
        prices=billing.list_prices(ctx),
    )
