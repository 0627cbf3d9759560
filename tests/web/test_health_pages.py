"""Operators inject faults on simulated GPUs, see their state, repair them, read reliability."""

from __future__ import annotations

import html
import re

from gpudock.platform import Platform
from gpudock.services.fleet import inventory
from tests.support.web import Browser, log_in
from tests.web.test_pages import create


def gpu_row(admin: Browser, gpu_id: str) -> str:
    page: str = admin.client.get("/admin/hosts/live").text
    return page.split(f'data-gpu="{gpu_id}"')[1].split("</tr>")[0]


def first_gpu(platform: Platform, model: str) -> str:
    host = next(h for h in inventory.list_hosts(platform.ctx) if h.gpus[0].model == model)
    return sorted(host.gpus, key=lambda g: g.index)[0].id


def test_health_pages_and_actions_are_for_admins_only(console: Platform) -> None:
    alice = log_in(console, "alice")
    gpu = first_gpu(console, "A100-80GB")
    assert alice.client.get("/admin/reliability").status_code == 403
    assert alice.post("/admin/gpus/fault", {"gpu": gpu, "xid": "48"}).status_code == 403
    assert alice.post(f"/admin/gpus/{gpu}/repair").status_code == 403
    assert 'data-state="healthy"' in gpu_row(log_in(console, "admin"), gpu)


def test_admin_injects_a_fault_sees_the_state_and_repairs(console: Platform) -> None:
    admin = log_in(console, "admin")
    gpu = first_gpu(console, "A100-80GB")
    hosts = admin.client.get("/admin/hosts").text
    assert 'id="fault-form"' in hosts and f'<option value="{gpu}"' in hosts
    bad = admin.post("/admin/gpus/fault", {"gpu": gpu, "xid": "4x8"})
    assert bad.status_code == 422 and "whole number" in bad.text
    assert 'value="4x8"' in bad.text
    zero = admin.post("/admin/gpus/fault", {"gpu": gpu, "xid": "0"})
    assert zero.status_code == 422 and "bad Xid 0" in zero.text
    missing = admin.post("/admin/gpus/fault", {"gpu": "GPU-nope", "xid": "48"})
    assert missing.status_code == 422 and "no GPU" in html.unescape(missing.text)
    assert 'data-state="healthy"' in gpu_row(admin, gpu)
    done = admin.post("/admin/gpus/fault", {"gpu": gpu, "xid": "48", "message": "drill"})
    assert done.status_code == 303
    console.reconciler.drain()
    row = gpu_row(admin, gpu)
    state = re.search(r'data-state="([a-z]+)"', row)
    assert state and state.group(1) in ("unhealthy", "draining") and "Xid 48" in row
    assert 'data-action="repair"' in row
    report = admin.client.get("/admin/reliability").text
    faults = report.split('id="faults"')[1]
    assert gpu in faults and "xid 48" in faults and "drill" in faults
    assert admin.post(f"/admin/gpus/{gpu}/repair").status_code == 303
    assert 'data-state="healthy"' in gpu_row(admin, gpu)
    assert 'data-action="repair"' not in gpu_row(admin, gpu)


def test_a_faulted_gpus_tenant_is_moved_off_it(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    create(alice, name="victim", gpu_model="A100-80GB")
    console.reconciler.drain()
    held = next(
        g.id for h in inventory.list_hosts(console.ctx) for g in h.gpus if g.allocation is not None
    )
    assert ">victim<" in gpu_row(admin, held)
    assert admin.post("/admin/gpus/fault", {"gpu": held, "xid": "48"}).status_code == 303
    console.reconciler.drain()
    row = gpu_row(admin, held)
    assert ">victim<" not in row and 'data-state="unhealthy"' in row
