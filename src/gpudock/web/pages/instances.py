"""The user's pages: dashboard, instance list, create form, instance detail."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from gpudock.billing.money import format_amount
from gpudock.db.models import InstanceModel, UserModel
from gpudock.errors import Conflict, InvalidRequest, NotFound, PaymentRequired
from gpudock.messages import Message
from gpudock.services.accounts import users
from gpudock.services.accounts.logins import WebSession
from gpudock.services.billing import balances
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory
from gpudock.services.images import catalog as image_catalog
from gpudock.services.instances import actions as instances
from gpudock.services.instances import overview, queue, sizing, usage
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.ssh import connect as ssh_connect
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.web.deps import (
    ConsoleRoute,
    Context,
    CsrfViewer,
    Meter,
    Viewer,
    redirect,
    render,
)
from gpudock.web.pages import terminal

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
ACTIONS = {
    "start": instances.start_instance,
    "stop": instances.stop_instance,
    "restart": instances.restart_instance,
    "delete": instances.delete_instance,
}
MAX_GPU_COUNT = 16
# The create form's fields that show their own error; any other goes above the button.
FORM_FIELDS = ("name", "gpu_model", "gpu_count", "image", "disk_gb", "gpu_share", "gpu_memory_gb")
SESSIONS_SHOWN = 20


def _available(ctx: ServiceContext, user: UserModel) -> str:
    """The user's available balance with its currency."""
    return f"{format_amount(balances.summary(ctx, user).available)} {ctx.settings.currency}"


def _estimate_per_hour(
    ctx: ServiceContext, gpu_model: str | None, gpu_count: int, share_milli: int | None = None
) -> str:
    estimate = balances.estimate(ctx, gpu_model, gpu_count, share_milli)
    return f"{format_amount(estimate.per_hour)} {ctx.settings.currency}"


def _image_hint(
    ctx: ServiceContext, user: UserModel, image: str, gpu_model: str | None
) -> image_catalog.ImageHint | None:
    return image_catalog.image_hint(ctx, user, image, gpu_model) if image else None


def _owners(ctx: ServiceContext, viewer: WebSession) -> dict[str, str]:
    if not viewer.user.is_admin:
        return {viewer.user.id: viewer.user.name}
    return {u.id: u.name for u in users.list_users(ctx)}


@router.get("/")
def dashboard(request: Request, ctx: Context, viewer: Viewer) -> Response:
    own = overview.own_overview(ctx, viewer.user)
    models = inventory.gpu_summary(ctx)
    prices = balances.gpu_prices_per_hour(ctx)
    balance = _available(ctx, viewer.user)
    has_key = bool(ssh_keys.list_keys(ctx, viewer.user))
    return render(
        request,
        "dashboard.html",
        viewer,
        own=own,
        models=models,
        prices=prices,
        balance=balance,
        has_key=has_key,
    )


@router.get("/instances")
def instance_list(request: Request, ctx: Context, viewer: Viewer, page: int = 1) -> Response:
    listed = overview.instance_page(ctx, viewer.user, page)
    return render(request, "instances.html", viewer, listed=listed)


@router.get("/instances/rows")
def instance_rows(request: Request, ctx: Context, viewer: Viewer, page: int = 1) -> Response:
    """The list's table body, polled by htmx every 2 s."""
    listed = overview.instance_page(ctx, viewer.user, page)
    return render(request, "fragments/instance_rows.html", viewer, listed=listed)


@router.get("/instances/new")
def new_instance_form(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _form(request, ctx, viewer, {}, None)


def _form(
    request: Request,
    ctx: Context,
    viewer: WebSession,
    values: dict[str, str],
    errors: dict[str, str] | None,
    status_code: int = 200,
) -> Response:
    models = inventory.gpu_summary(ctx)
    values = {
        "gpu_model": models[0].model if models else "",
        "gpu_count": "1",
        "gpu_mode": "whole",
        "share": "",
        "share_unit": "fraction",
        "image": ctx.settings.default_image,
        "disk_gb": str(ctx.settings.default_disk_gb),
        **values,
    }
    return render(
        request,
        "instance_new.html",
        viewer,
        status_code,
        models=models,
        values=values,
        errors=errors or {},
        max_disk_gb=ctx.settings.max_disk_gb,
        shown_fields=FORM_FIELDS,
        hint=None
        if errors and "image" in errors
        else _image_hint(ctx, viewer.user, values["image"], values["gpu_model"] or None),
        image_choices=[(i.reference, i.name) for i in image_catalog.list_images(ctx, viewer.user)],
        **_availability_values(ctx, models, values),
    )


def _summary_of(models: list[inventory.ModelSummary], model: str) -> inventory.ModelSummary | None:
    return next((m for m in models if m.model == model), None)


def _count_or_one(raw: str) -> int:
    """The form's count for the estimate; anything unusable counts as one."""
    try:
        count = int(raw.strip())
    except ValueError:
        return 1
    return count if 0 <= count <= MAX_GPU_COUNT else 1


def _availability_values(
    ctx: ServiceContext, models: list[inventory.ModelSummary], form: dict[str, str]
) -> dict[str, Any]:
    """Free capacity and the price for what the form asks now; a share is
    sized as the server will size it (or the problem with it is shown)."""
    count = _count_or_one(form["gpu_count"])
    gpu_model = form["gpu_model"] or None
    share: int | None = None
    share_problem: str | None = None
    if form["gpu_mode"] == "share" and form["share"].strip():
        try:
            share = sizing.requested_share(ctx, _share_request(form))
        except InvalidRequest as exc:
            share_problem = exc.message
    return {
        "selected": _summary_of(models, form["gpu_model"]),
        "estimate": _estimate_per_hour(ctx, gpu_model, 1 if share else count, share),
        "count": count,
        "share_milli": share,
        "share_problem": share_problem,
    }


@router.get("/instances/new/availability")
def availability(
    request: Request,
    ctx: Context,
    viewer: Viewer,
    gpu_model: str = "",
    gpu_count: str = "1",
    gpu_mode: str = "whole",
    share: str = "",
    share_unit: str = "fraction",
) -> Response:
    """Live free/total and the estimated price for the chosen model and count
    (or share), polled and refreshed when any of them changes."""
    form = {"gpu_model": gpu_model, "gpu_count": gpu_count, "gpu_mode": gpu_mode}
    form |= {"share": share[:16], "share_unit": share_unit}
    values = _availability_values(ctx, inventory.gpu_summary(ctx), form)
    return render(request, "fragments/availability.html", viewer, **values)


@router.get("/instances/new/image-hint")
def image_hint(
    request: Request, ctx: Context, viewer: Viewer, image: str = "", gpu_model: str = ""
) -> Response:
    """Whether the image runs on the chosen model here, refreshed when either changes."""
    hint = _image_hint(ctx, viewer.user, image.strip(), gpu_model or None)
    return render(request, "fragments/image_hint.html", viewer, hint=hint)


def _whole_number(raw: str, low: int, high: int) -> int | None:
    """The field as an int in [low, high]; None if empty; ValueError if not."""
    text = raw.strip()
    if not text:
        return None
    value = int(text)
    if not low <= value <= high:
        raise ValueError(text)
    return value


def _count_problem(models: list[inventory.ModelSummary], form: dict[str, str]) -> Message:
    selected = _summary_of(models, form["gpu_model"])
    if selected is None:
        return Message("GPU count must be a whole number from 0 to {most}", most=MAX_GPU_COUNT)
    return Message(
        "GPU count must be a whole number from 0 to {most}: no {model} host has more",
        most=selected.max_per_host,
        model=selected.model,
    )


def _parse_form(
    ctx: ServiceContext, models: list[inventory.ModelSummary], form: dict[str, str]
) -> tuple[InstanceRequest, dict[str, str]]:
    """The request the form asks for and what is wrong with its fields as typed; a
    field that does not parse is left to its default, so the others are checked too."""
    problems: dict[str, str] = {}
    most_disk = ctx.settings.max_disk_gb
    try:
        disk = _whole_number(form["disk_gb"], 1, most_disk)
    except ValueError:
        disk = None
        problems["disk_gb"] = Message(
            "disk must be a whole number of GB from 1 to {most}", most=most_disk
        )
    base = InstanceRequest(
        gpu_model=form["gpu_model"] or None,
        gpu_count=1,
        name=form["name"].strip() or None,
        image=form["image"].strip() or None,
        disk_gb=disk,
    )
    if form["gpu_mode"] == "share":
        try:
            share = _share_request(form)
        except InvalidRequest as exc:
            problems[exc.field or "gpu_share"] = exc.message
            return base, problems
        return replace(share, name=base.name, image=base.image, disk_gb=disk), problems
    selected = _summary_of(models, form["gpu_model"])
    try:
        count = _whole_number(
            form["gpu_count"], 0, selected.max_per_host if selected else MAX_GPU_COUNT
        )
    except ValueError:
        count = None
        problems["gpu_count"] = _count_problem(models, form)
    gpu_count = 1 if count is None else count
    model = base.gpu_model if gpu_count > 0 else None
    return replace(base, gpu_model=model, gpu_count=gpu_count), problems


def _share_request(form: dict[str, str]) -> InstanceRequest:
    """A share of one GPU of the chosen model: a fraction of the card, or GB of it."""
    text = form["share"].strip()
    model = form["gpu_model"] or None
    if form["share_unit"] == "gb":
        message = "GPU memory must be a whole number of GB"
        try:
            memory = _whole_number(text, 1, 65536)
        except ValueError:
            memory = None
        if memory is None:
            raise InvalidRequest(message, field="gpu_memory_gb")
        return InstanceRequest(gpu_model=model, gpu_count=1, gpu_memory_gb=memory)
    try:
        fraction = Decimal(text)
    except InvalidOperation:
        fraction = Decimal("NaN")
    if not fraction.is_finite():
        raise InvalidRequest(
            "the share must be a fraction of the card between 0 and 1, such as 0.25",
            field="gpu_share",
        )
    return InstanceRequest(gpu_model=model, gpu_count=1, gpu_share=fraction)


@router.post("/instances/new")
@router.post("/instances")  # the form's address before it stayed on /instances/new
def create_instance(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    gpu_model: Annotated[str, Form(max_length=64)] = "",
    gpu_count: Annotated[str, Form(max_length=8)] = "1",
    name: Annotated[str, Form(max_length=63)] = "",
    image: Annotated[str, Form(max_length=512)] = "",
    disk_gb: Annotated[str, Form(max_length=12)] = "",
    gpu_mode: Annotated[str, Form(max_length=8)] = "whole",
    share: Annotated[str, Form(max_length=16)] = "",
    share_unit: Annotated[str, Form(max_length=8)] = "fraction",
) -> Response:
    """All the form's problems at once, each beside its field; the page stays at
    /instances/new with what was typed."""
    form = {"gpu_model": gpu_model, "gpu_count": gpu_count, "name": name}
    form |= {"image": image, "disk_gb": disk_gb}
    form |= {"gpu_mode": gpu_mode, "share": share, "share_unit": share_unit}
    asked, problems = _parse_form(ctx, inventory.gpu_summary(ctx), form)
    problems = instances.request_problems(ctx, viewer.user, asked) | problems
    if not problems:
        try:
            created = instances.create_instance(ctx, viewer.user, asked)
        except (InvalidRequest, NotFound, Conflict, PaymentRequired) as exc:
            problems = {exc.field or "form": exc.message}
        else:
            return redirect(f"/instances/{created.id}")
    return _form(request, ctx, viewer, form, problems, 422)


def _detail_values(
    ctx: ServiceContext, viewer: WebSession, instance: InstanceModel
) -> dict[str, Any]:
    return {
        "v": instances.view(ctx, instance),
        "events": instances.list_events(ctx, viewer.user, instance.id),
        "ssh": ssh_connect.ssh_line(ctx, viewer.user, instance.id),
        "owner": _owners(ctx, viewer).get(instance.user_id, instance.user_id),
        "sessions": ssh_sessions.list_sessions(ctx, viewer.user, instance.id, SESSIONS_SHOWN),
        "key_names": {k.fingerprint: k.name for k in ssh_keys.list_keys(ctx, viewer.user)},
        "queue": queue.queue_position(ctx, instance),
    }


@router.get("/instances/{instance_id}")
def instance_detail(request: Request, ctx: Context, viewer: Viewer, instance_id: str) -> Response:
    instance = instances.get_instance(ctx, viewer.user, instance_id)
    values = _detail_values(ctx, viewer, instance)
    can_save = instance.status.value not in ("deleting", "deleted")
    connect = ssh_connect.connect_info(ctx, viewer.user, instance) if can_save else None
    shell = terminal.page_values(ctx)
    page = render(
        request,
        "instance.html",
        viewer,
        can_save_image=can_save,
        connect=connect,
        **values,
        **shell,
    )
    return terminal.allow_terminal_styles(page, shell)


@router.get("/instances/{instance_id}/live")
def instance_live(request: Request, ctx: Context, viewer: Viewer, instance_id: str) -> Response:
    """Status, actions and events, polled by htmx every 2 s."""
    instance = instances.get_instance(ctx, viewer.user, instance_id)
    values = _detail_values(ctx, viewer, instance)
    return render(request, "fragments/instance_live.html", viewer, **values)


@router.get("/instances/{instance_id}/usage")
def instance_usage(
    request: Request, ctx: Context, viewer: Viewer, meter: Meter, instance_id: str
) -> Response:
    """CPU, memory and processes now, polled by htmx every 2 s; empty unless running."""
    now = usage.instance_usage(ctx, viewer.user, instance_id, meter)
    return render(
        request, "fragments/instance_usage.html", viewer, instance_id=instance_id, usage=now
    )


@router.post("/instances/{instance_id}/{action}")
def instance_action(ctx: Context, viewer: CsrfViewer, instance_id: str, action: str) -> Response:
    operation = ACTIONS.get(action)
    if operation is None:
        raise NotFound(f"no action {action!r}: use start, stop, restart or delete")
    instance = operation(ctx, viewer.user, instance_id)
    return redirect("/instances" if action == "delete" else f"/instances/{instance.id}")
