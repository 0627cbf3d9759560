"""Console pages on the fake runtime: tenancy, forms and inline errors, actions, languages."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances import overview
from gpudock.services.instances.actions import InstanceRequest
from tests.support.web import Browser, log_in


def create(browser: Browser, **fields: str) -> str:
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "", "image": "", "disk_gb": ""}
    response = browser.post("/instances", {**data, **fields})
    assert response.status_code == 303, response.text
    location: str = response.headers["location"]
    return location.rsplit("/", 1)[1]


def status_on_page(browser: Browser, instance_id: str) -> str:
    html = browser.client.get(f"/instances/{instance_id}/live").text
    found = re.search(r'data-status="([a-z]+)"', html)
    assert found, html
    return found.group(1)


def test_another_users_instance_is_404_everywhere(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    instance_id = create(alice, name="secret")
    for path in (f"/instances/{instance_id}", f"/instances/{instance_id}/live", "/instances/x"):
        response = bob.client.get(path)
        assert response.status_code == 404 and "Not found" in response.text
    for verb in ("stop", "delete"):
        assert bob.post(f"/instances/{instance_id}/{verb}").status_code == 404
    assert "secret" not in bob.client.get("/instances").text
    assert status_on_page(alice, instance_id) == "pending"  # untouched


def test_operator_pages_are_for_admins_only(console: Platform) -> None:
    alice = log_in(console, "alice")
    for path in ("/admin/hosts", "/admin/users", "/admin/hosts/live"):
        assert alice.client.get(path).status_code == 403
    assert alice.post("/admin/users", {"name": "mallory"}).status_code == 403
    assert "/admin/hosts" not in alice.client.get("/").text


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"gpu_count": "two"}, "gpu_count", "GPU count must be a whole number"),
        ({"gpu_count": "99"}, "gpu_count", "GPU count must be a whole number"),
        ({"gpu_model": "H100-80GB"}, "gpu_model", "H100-80GB"),
        ({"name": "Bad Name"}, "name", "bad instance name"),
        ({"disk_gb": "-3"}, "disk_gb", "disk must be"),
        ({"gpu_count": "9"}, "gpu_count", ""),
    ],
)
def test_create_form_shows_service_errors_inline(
    console: Platform, fields: dict[str, str], field: str, message: str
) -> None:
    alice = log_in(console, "alice")
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "", "image": "", "disk_gb": ""}
    response = alice.post("/instances", {**data, **fields})
    assert response.status_code == 422
    html = response.text
    assert f'data-error-for="{field}"' in html and 'class="field-error"' in html
    assert message in html
    for value in fields.values():
        assert f'value="{value}"' in html or f'"{value}" selected' in html or value in html


def test_create_stop_start_restart_delete(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = create(alice, name="train", gpu_count="2", disk_gb="20")
    console.reconciler.drain()
    assert status_on_page(alice, instance_id) == "running"
    page = alice.client.get(f"/instances/{instance_id}").text
    assert "2 × A100-80GB" in page and "sim0-a100-80gb" in page and "docker exec" not in page
    dashboard = alice.client.get("/").text
    assert 'id="running-count">1<' in dashboard and "train" in dashboard
    assert "<strong>A100-80GB</strong></td><td>80 GiB</td>" in dashboard  # binary, named so
    for verb, settled in (("stop", "stopped"), ("start", "running"), ("restart", "running")):
        response = alice.post(f"/instances/{instance_id}/{verb}")
        assert response.status_code == 303, response.text
        console.reconciler.drain()
        assert status_on_page(alice, instance_id) == settled
    events = alice.client.get(f"/instances/{instance_id}").text
    assert events.count("<li><time>") >= 8
    assert alice.post(f"/instances/{instance_id}/explode").status_code == 404
    deleted = alice.post(f"/instances/{instance_id}/delete")
    assert deleted.headers["location"] == "/instances"
    console.reconciler.drain()
    assert "train" not in alice.client.get("/instances/rows").text


def test_conflicting_action_is_an_error_page(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = create(alice)
    response = alice.post(f"/instances/{instance_id}/restart")
    assert response.status_code == 409 and "only a running instance" in response.text


def test_admin_sees_tenants_on_hosts_and_creates_users(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    create(alice, name="job", gpu_model="RTX4090-24GB")
    console.reconciler.drain()
    hosts = admin.client.get("/admin/hosts").text
    assert "sim1-rtx4090-24gb" in hosts and ">job<" in hosts and "(alice)" in hosts
    assert 'data-state="healthy"' in hosts
    assert "alice" in admin.client.get("/instances").text  # admins see every instance
    made = admin.post("/admin/users", {"name": "carol", "password": "carol's password"})
    assert made.status_code == 201 and "gpd_" in made.text
    log_in(console, "carol", "carol's password")
    again = admin.post("/admin/users", {"name": "carol"})
    assert again.status_code == 422 and "already exists" in again.text


def test_language_switch_is_remembered(console: Platform) -> None:
    alice = log_in(console, "alice")
    switched = alice.client.get("/lang/zh-CN?next=/instances", follow_redirects=False)
    assert switched.headers["location"] == "/instances"
    assert "gpudock_lang=zh-CN" in switched.headers["set-cookie"]
    assert '<html lang="zh-CN">' in alice.client.get("/").text
    assert "概览" in alice.client.get("/instances/new").text
    alice.client.get("/lang/en")
    assert "Dashboard" in alice.client.get("/").text
    anonymous = TestClient(create_app(console, run_reconciler=False))
    assert "登录" in anonymous.get("/login", headers={"Accept-Language": "zh-CN,zh;q=0.9"}).text


def test_redirects_stay_on_this_site_and_pages_send_security_headers(console: Platform) -> None:
    alice = log_in(console, "alice")
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        response = alice.client.get("/lang/en", params={"next": target}, follow_redirects=False)
        assert response.headers["location"] == "/"
    headers = alice.client.get("/").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert alice.client.get("/static/htmx.min.js").status_code == 200


def test_instance_list_is_paged_newest_first(console: Platform) -> None:
    alice_user = next(u for u in users.list_users(console.ctx) if u.name == "alice")
    for n in range(overview.PAGE_SIZE + 1):
        request = InstanceRequest(gpu_model=None, gpu_count=0, name=f"n{n}")
        instances.create_instance(console.ctx, alice_user, request)
    alice = log_in(console, "alice")
    first = alice.client.get("/instances").text
    assert "Page 1 of 2" in first and f"{overview.PAGE_SIZE + 1} instances" in first
    assert first.count("<tr data-instance=") == overview.PAGE_SIZE and ">n0<" not in first
    last = alice.client.get("/instances/rows?page=99").text  # clamped to the last page
    assert last.count("<tr data-instance=") == 1 and ">n0<" in last
    assert 'id="running-count">0<' in alice.client.get("/").text


def test_an_unnamed_instance_is_titled_by_its_id_once(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = create(alice)
    heading = re.search(r"<h1>(.*?)</h1>", alice.client.get(f"/instances/{instance_id}").text)
    assert heading is not None and heading.group(1).count(instance_id) == 1
    named = create(alice, name="named")
    heading = re.search(r"<h1>(.*?)</h1>", alice.client.get(f"/instances/{named}").text)
    assert heading is not None and "named" in heading.group(1) and named in heading.group(1)


def test_on_kubernetes_the_console_says_a_stop_deletes_the_system_disk(console: Platform) -> None:
    """Not in small print: the stop's question and a warning on the instance's page
    and the create form (a stop on Kubernetes deletes the pod, and its files)."""
    alice = log_in(console, "alice")
    instance_id = create(alice, name="train")
    console.reconciler.drain()
    warning = "stopping an instance deletes its system disk"
    question = "but not its system disk"
    docker_page = alice.client.get(f"/instances/{instance_id}/live").text
    assert warning not in docker_page and question not in docker_page
    assert "its disk is kept" in docker_page
    assert warning not in alice.client.get("/instances/new").text
    console.ctx.settings = console.ctx.settings.model_copy(update={"runtime": "kubernetes"})
    page = alice.client.get(f"/instances/{instance_id}/live").text
    assert warning in page and question in page and "its disk is kept" not in page
    assert warning in alice.client.get("/instances/new").text
    alice.client.get("/lang/zh-CN")
    chinese = alice.client.get(f"/instances/{instance_id}/live").text
    assert "删除实例的系统盘" in chinese and warning not in chinese
    alice.client.get("/lang/en")
    console.ctx.settings = console.ctx.settings.model_copy(update={"kubernetes_home": True})
    kept = alice.client.get(f"/instances/{instance_id}/live").text
    assert "deletes every file outside /root (" in kept and "/root is kept" in kept
    assert warning not in kept and question not in kept
    assert "deletes every file outside /root (" in alice.client.get("/instances/new").text
