"""Operator billing (admins): prices per GPU model, and top-ups of users' wallets."""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from gpudock.billing.money import format_amount, parse_amount
from gpudock.errors import Conflict, InvalidRequest
from gpudock.services.accounts import users
from gpudock.services.accounts.logins import WebSession
from gpudock.services.billing import balances as billing
from gpudock.services.billing import operator
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory
from gpudock.web.deps import AdminCsrfViewer, AdminViewer, ConsoleRoute, Context, render

router = APIRouter(prefix="/admin", route_class=ConsoleRoute, include_in_schema=False)


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    **values: Any,
) -> Response:
    defaults: dict[str, Any] = {
        "price_error": None,
        "topup_error": None,
        "topped": None,
        "priced": None,
        "form": {},
    }
    return render(
        request,
        "admin_billing.html",
        viewer,
        status_code,
        prices=billing.list_prices(ctx),
        units=billing.PRICE_UNITS,
        kinds=billing.PRICE_KINDS,
        models=[m.model for m in inventory.gpu_summary(ctx)],
        users=users.list_users(ctx),
        wallets=operator.wallets(ctx, viewer.user),
        topups=operator.recent_topups(ctx, viewer.user),
        money=format_amount,
        currency=ctx.settings.currency,
        topup_key=secrets.token_urlsafe(16),  # one key per rendered form: no double credit
        **(defaults | values),
    )


@router.get("/billing")
def billing_admin(request: Request, ctx: Context, viewer: AdminViewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/billing/prices")
def set_price(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    kind: Annotated[str, Form(max_length=16)],
    amount: Annotated[str, Form(max_length=40)],
    gpu_model: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    form = {"kind": kind, "gpu_model": gpu_model, "amount": amount}
    try:
        micros = parse_amount(amount, allow_zero=True)
        model = (gpu_model or None) if kind == "gpu" else None
        row = billing.set_price(ctx, viewer.user, kind, model, micros)
    except InvalidRequest as exc:
        return _page(request, ctx, viewer, 422, price_error=exc.message, form=form)
    return _page(request, ctx, viewer, priced=row)


@router.post("/billing/topups")
def topup(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    user: Annotated[str, Form(max_length=64)],
    amount: Annotated[str, Form(max_length=40)],
    key: Annotated[str, Form(max_length=64)],
    note: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    form = {"user": user, "topup_amount": amount, "note": note}
    try:
        done = billing.topup(ctx, viewer.user, user, parse_amount(amount), key, note.strip())
    except (InvalidRequest, Conflict) as exc:
        return _page(request, ctx, viewer, 422, topup_error=exc.message, form=form)
    return _page(request, ctx, viewer, 201, topped=done)
