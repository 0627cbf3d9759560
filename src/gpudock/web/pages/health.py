"""GPU health for operators: inject a fault on a simulated GPU, repair it, and the
fleet's reliability statistics with the latest faults."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.services.fleet import gpu_health as health
from gpudock.services.fleet import reliability
from gpudock.web.deps import (
    AdminCsrfViewer,
    AdminViewer,
    ConsoleRoute,
    Context,
    redirect,
    render,
)
from gpudock.web.pages.admin import hosts_values

router = APIRouter(prefix="/admin", route_class=ConsoleRoute, include_in_schema=False)
RECENT_FAULTS = 50


@router.post("/gpus/fault")
def inject_fault(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    gpu: Annotated[str, Form(max_length=128)],
    xid: Annotated[str, Form(max_length=16)],
    message: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """Errors come back inline on the hosts page, with what was typed."""
    form = {"gpu": gpu, "xid": xid, "message": message}
    try:
        number = int(xid.strip()) if xid.strip().isdigit() else -1
        if number < 0:
            raise InvalidRequest("the Xid must be a whole number, e.g. 48 or 79", field="xid")
        health.inject_fault(ctx, viewer.user, gpu, number, message.strip())
    except (InvalidRequest, Conflict, NotFound) as exc:
        values = hosts_values(ctx) | {"fault_error": exc.message, "fault_form": form}
        return render(request, "admin_hosts.html", viewer, 422, **values)
    return redirect(f"/admin/hosts#gpu-{gpu}")


@router.post("/gpus/{gpu_uuid}/repair")
def repair_gpu(ctx: Context, viewer: AdminCsrfViewer, gpu_uuid: str) -> Response:
    health.repair_gpu(ctx, viewer.user, gpu_uuid)
    return redirect("/admin/hosts")


@router.get("/reliability")
def reliability_page(request: Request, ctx: Context, viewer: AdminViewer) -> Response:
    return render(
        request,
        "admin_reliability.html",
        viewer,
        report=reliability.report(ctx, viewer.user),
        faults=health.list_faults(ctx, viewer.user, RECENT_FAULTS),
    )
