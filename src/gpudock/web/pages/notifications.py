"""Notifications in the console: the list, webhooks (the secret shown once),
the email address, the delivery log; and an instance's auto-stop, a fragment
of its page. Everything is the viewer's own (the services look among it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, GpudockError, InvalidRequest
from gpudock.services.accounts.logins import WebSession
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.instances import auto_stop
from gpudock.services.instances.auto_stop import AutoStopPolicy
from gpudock.services.notifications import endpoints
from gpudock.services.notifications.endpoints import NewWebhook
from gpudock.services.notifications.outbox import KINDS
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, form_error, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
SHOWN = 100
DELIVERIES_SHOWN = 50


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    *,
    created: NewWebhook | None = None,
    error: GpudockError | None = None,
) -> Response:
    user = viewer.user
    return render(
        request,
        "notifications.html",
        viewer,
        status_code,
        notifications=endpoints.list_notifications(ctx, user, limit=SHOWN),
        webhooks=endpoints.list_webhooks(ctx, user),
        email=endpoints.email_endpoint(ctx, user),
        email_enabled=bool(ctx.settings.smtp_host),
        deliveries=endpoints.list_deliveries(ctx, user, limit=DELIVERIES_SHOWN),
        kinds=KINDS,
        created=created,
        **form_error(error),
    )


@router.get("/notifications")
def notifications_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/notifications/webhooks")
def add_webhook(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    url: Annotated[str, Form(max_length=2000)],
    kinds: Annotated[list[str] | None, Form()] = None,
) -> Response:
    """The secret is on this page only (no redirect): it is not shown again."""
    try:
        created = endpoints.create_webhook(ctx, viewer.user, url, kinds or [])
    except (InvalidRequest, Conflict) as exc:
        return _page(request, ctx, viewer, 422, error=exc)
    return _page(request, ctx, viewer, 201, created=created)


@router.post("/notifications/webhooks/{webhook_id}/remove")
def remove_webhook(ctx: Context, viewer: CsrfViewer, webhook_id: str) -> Response:
    endpoints.remove_webhook(ctx, viewer.user, webhook_id)
    return redirect("/notifications")


@router.post("/notifications/email")
def set_email(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    address: Annotated[str, Form(max_length=320)] = "",
) -> Response:
    """An address sets it; an empty one stops email."""
    try:
        if address.strip():
            endpoints.set_email(ctx, viewer.user, address, [])
        elif endpoints.email_endpoint(ctx, viewer.user) is not None:
            endpoints.clear_email(ctx, viewer.user)
    except (InvalidRequest, Conflict) as exc:
        return _page(request, ctx, viewer, 422, error=exc)
    return redirect("/notifications")


# -- an instance's auto-stop (a fragment of its page) --------------------------------
def _fragment(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    instance_id: str,
    status_code: int = 200,
    error: GpudockError | None = None,
) -> Response:
    instance = instances.get_instance(ctx, viewer.user, instance_id)
    view = instances.view(ctx, instance)
    return render(
        request,
        "fragments/auto_stop.html",
        viewer,
        status_code,
        auto_stop_loaded=True,
        instance=instance,
        policy=view.auto_stop,
        summary=auto_stop.describe(view.auto_stop) if view.auto_stop else None,
        default_below=ctx.settings.idle_below_pct,
        **form_error(error),
    )


@router.get("/instances/{instance_id}/auto-stop")
def auto_stop_fragment(
    request: Request, ctx: Context, viewer: Viewer, instance_id: str
) -> Response:
    return _fragment(request, ctx, viewer, instance_id)


@router.post("/instances/{instance_id}/auto-stop")
def change_auto_stop(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    instance_id: str,
    idle_minutes: Annotated[str, Form(max_length=8)] = "",
    idle_below: Annotated[str, Form(max_length=8)] = "",
    stop_at: Annotated[str, Form(max_length=32)] = "",
    stop_on_exit: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    """Empty fields are off; the whole policy is replaced, as the API's PUT does."""
    try:
        policy = AutoStopPolicy(
            idle_after_s=_number(idle_minutes, "idle_minutes", 60),
            idle_below_pct=_float(idle_below),
            stop_at=_utc(stop_at),
            on_exit=bool(stop_on_exit),
        )
        instances.change_auto_stop(ctx, viewer.user, instance_id, policy)
    except (InvalidRequest, Conflict) as exc:
        return _fragment(request, ctx, viewer, instance_id, 422, exc)
    return redirect(f"/instances/{instance_id}")


def _number(text: str, field: str, unit_s: int) -> int | None:
    if not text.strip():
        return None
    if not text.strip().isdigit():
        raise InvalidRequest("give a whole number of minutes", field=field)
    return int(text) * unit_s


def _float(text: str) -> float | None:
    try:
        return float(text) if text.strip() else None
    except ValueError:
        raise InvalidRequest(
            "give the utilisation as a number, e.g. 5", field="idle_below"
        ) from None


def _utc(text: str) -> datetime | None:
    """The form's datetime-local, read as UTC (the console shows times in UTC)."""
    if not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidRequest(
            "give a date and time, e.g. 2026-12-02T03:00", field="stop_at"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
