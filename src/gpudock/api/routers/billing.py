"""Billing routes: prices, admin top-ups, and each user's own statements."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator

from gpudock.api.billing_schemas import (
    BalancePublic,
    BudgetRequest,
    LedgerLinePublic,
    LedgerPagePublic,
    PricePublic,
    PriceSetRequest,
    PricesPublic,
    TopupPublic,
    TopupRequest,
    UsagePublic,
    UsageReportPublic,
)
from gpudock.api.deps import AdminUser, Context, CurrentUser, Language
from gpudock.api.errors import error_responses
from gpudock.billing.money import format_amount, parse_amount
from gpudock.db.models import BillingPriceModel
from gpudock.messages import localize
from gpudock.services.billing import balances as billing
from gpudock.services.billing import statements
from gpudock.services.billing.balances import BalanceSummary
from gpudock.services.billing.statements import Line

router = APIRouter(tags=["billing"])
UserRef = Annotated[
    str | None,
    Query(alias="user", max_length=64, description="Admins: another user's name or id"),
]


def _iso_8601(value: Any) -> Any:
    """Only ISO 8601 text: pydantic alone would also read "0.5" as a Unix time."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{value[:40]!r} is not an ISO 8601 date and time") from exc
    return value


Instant = Annotated[datetime, BeforeValidator(_iso_8601)]
From = Annotated[
    Instant | None, Query(alias="from", description="Inclusive, ISO 8601 (UTC if no zone)")
]
To = Annotated[Instant | None, Query(alias="to", description="Exclusive, ISO 8601")]
Format = Annotated[Literal["json", "csv"], Query(alias="format")]
CSV_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}}
}
SUBJECT = error_responses(404)  # `user=`: unknown, or not visible to the caller


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _price(row: BillingPriceModel, currency: str) -> PricePublic:
    return PricePublic(
        kind=row.kind,
        gpu_model=row.gpu_model,
        amount=format_amount(row.amount_micro),
        amount_micro=row.amount_micro,
        unit=billing.PRICE_UNITS[row.kind],
        currency=currency,
        updated_at=row.updated_at,
    )


@router.get("/prices", response_model=PricesPublic)
def list_prices(ctx: Context, _user: CurrentUser) -> PricesPublic:
    currency = ctx.settings.currency
    return PricesPublic(
        currency=currency, prices=[_price(p, currency) for p in billing.list_prices(ctx)]
    )


@router.put("/admin/prices", response_model=PricePublic)
@router.post(
    "/admin/prices",
    response_model=PricePublic,
    deprecated=True,
    operation_id="set_price_post",
    summary="Set Price (POST: an alias of PUT, kept for older clients)",
)
def set_price(ctx: Context, admin: AdminUser, body: PriceSetRequest) -> PricePublic:
    amount = parse_amount(body.amount, allow_zero=True)
    row = billing.set_price(ctx, admin, body.kind, body.gpu_model, amount)
    return _price(row, ctx.settings.currency)


@router.post(
    "/admin/topups",
    response_model=TopupPublic,
    status_code=201,
    responses=error_responses(409),
)
def topup(
    ctx: Context,
    admin: AdminUser,
    body: TopupRequest,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=128,
            description="A replay with the same key returns the first result",
        ),
    ] = None,
) -> TopupPublic:
    amount = parse_amount(body.amount)
    done = billing.topup(ctx, admin, body.user, amount, idempotency_key, body.note)
    if done.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return TopupPublic(
        id=done.posting.id,
        key=done.posting.key,
        user_id=done.user.id,
        user_name=done.user.name,
        amount=format_amount(done.posting.amount_micro),
        amount_micro=done.posting.amount_micro,
        balance=format_amount(done.balance),
        balance_micro=done.balance,
        currency=ctx.settings.currency,
        at=done.posting.at,
        replayed=done.replayed,
    )


def _balance(s: BalanceSummary, currency: str) -> BalancePublic:
    return BalancePublic(
        user_id=s.user.id,
        user_name=s.user.name,
        currency=currency,
        balance=format_amount(s.balance),
        balance_micro=s.balance,
        unposted=format_amount(s.unposted),
        available=format_amount(s.available),
        available_micro=s.available,
        burn_per_hour=format_amount(s.burn_per_hour),
        runway_seconds=s.runway_s,
        monthly_budget=None if s.monthly_budget is None else format_amount(s.monthly_budget),
        month_spent=format_amount(s.month_spent),
    )


@router.get("/billing/balance", response_model=BalancePublic, responses=SUBJECT)
def balance(ctx: Context, user: CurrentUser, user_ref: UserRef = None) -> BalancePublic:
    subject = billing.resolve_subject(ctx, user, user_ref)
    return _balance(billing.summary(ctx, subject), ctx.settings.currency)


@router.put("/billing/budget", response_model=BalancePublic, responses=SUBJECT)
def set_budget(
    ctx: Context, user: CurrentUser, body: BudgetRequest, user_ref: UserRef = None
) -> BalancePublic:
    subject = billing.resolve_subject(ctx, user, user_ref)
    amount = (
        None
        if body.monthly is None
        else parse_amount(body.monthly, field="monthly", allow_zero=True)
    )
    return _balance(billing.set_budget(ctx, subject, amount), ctx.settings.currency)


def _line(line: Line, currency: str, lang: str) -> LedgerLinePublic:
    p = line.posting
    return LedgerLinePublic(
        id=p.id,
        at=p.at,
        kind=p.kind,
        amount=format_amount(line.signed_amount),
        amount_micro=line.signed_amount,
        currency=currency,
        instance_id=p.instance_id,
        instance_name=line.instance_name,
        gpu_model=p.gpu_model,
        gpu_count=p.gpu_count,
        from_at=p.from_at,
        to_at=p.to_at,
        seconds=p.seconds,
        rate=format_amount(p.rate_micro) if p.rate_micro is not None else None,
        rate_unit=line.rate_unit,
        description=localize(p.description, lang, p.description_msg),
    )


def _csv(chunks: Iterator[str], name: str) -> StreamingResponse:
    return StreamingResponse(
        chunks,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="gpudock-{name}.csv"'},
    )


@router.get(
    "/billing/ledger", response_model=LedgerPagePublic, responses={**CSV_RESPONSE, **SUBJECT}
)
def ledger(
    ctx: Context,
    user: CurrentUser,
    lang: Language,
    start: From = None,
    end: To = None,
    limit: Annotated[int, Query(ge=1, le=statements.MAX_PAGE)] = 100,
    cursor: Annotated[int | None, Query(ge=0)] = None,
    output: Format = "json",
    user_ref: UserRef = None,
) -> LedgerPagePublic | StreamingResponse:
    if output == "csv":
        return ledger_csv(ctx, user, start, end, user_ref)
    subject = billing.resolve_subject(ctx, user, user_ref)
    page = statements.ledger_page(ctx, subject, _utc(start), _utc(end), limit, cursor)
    currency = ctx.settings.currency
    return LedgerPagePublic(
        currency=currency,
        lines=[_line(line, currency, lang) for line in page.lines],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/billing/ledger.csv",
    response_class=StreamingResponse,
    responses={**CSV_RESPONSE, **SUBJECT},
)
def ledger_csv(
    ctx: Context, user: CurrentUser, start: From = None, end: To = None, user_ref: UserRef = None
) -> StreamingResponse:
    subject = billing.resolve_subject(ctx, user, user_ref)
    lines = statements.all_lines(ctx, subject, _utc(start), _utc(end))
    return _csv(statements.ledger_csv(lines, ctx.settings.currency), "ledger")


@router.get(
    "/billing/usage", response_model=UsageReportPublic, responses={**CSV_RESPONSE, **SUBJECT}
)
def usage(
    ctx: Context,
    user: CurrentUser,
    start: From = None,
    end: To = None,
    output: Format = "json",
    user_ref: UserRef = None,
) -> UsageReportPublic | StreamingResponse:
    if output == "csv":
        return usage_csv(ctx, user, start, end, user_ref)
    subject = billing.resolve_subject(ctx, user, user_ref)
    items = statements.usage(ctx, subject, _utc(start), _utc(end))
    return UsageReportPublic(
        currency=ctx.settings.currency,
        instances=[
            UsagePublic(
                instance_id=u.instance_id,
                instance_name=u.instance_name,
                gpu_model=u.gpu_model,
                gpu_count=u.gpu_count,
                seconds=u.seconds,
                gpu_seconds=u.gpu_seconds,
                compute_amount=format_amount(u.compute_amount),
                storage_seconds=u.storage_seconds,
                storage_amount=format_amount(u.storage_amount),
                amount=format_amount(u.amount),
            )
            for u in items
        ],
        total=format_amount(sum(u.amount for u in items)),
    )


@router.get(
    "/billing/usage.csv",
    response_class=StreamingResponse,
    responses={**CSV_RESPONSE, **SUBJECT},
)
def usage_csv(
    ctx: Context, user: CurrentUser, start: From = None, end: To = None, user_ref: UserRef = None
) -> StreamingResponse:
    subject = billing.resolve_subject(ctx, user, user_ref)
    items = statements.usage(ctx, subject, _utc(start), _utc(end))
    return _csv(statements.usage_csv(items, ctx.settings.currency), "usage")
