"""The instance page's services card on the fake runtime: Open buttons, a link
shown once and revoked, publishing and removing a port, Start JupyterLab."""

from __future__ import annotations

import re

import pytest

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.errors import Unauthenticated
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions, published
from gpudock.services.instances.actions import InstanceRequest
from tests.support.web import log_in

LINK = re.compile(r'id="service-link-url">([^<]+)<')


def _running_instance(console: Platform) -> str:
    alice = next(u for u in users.list_users(console.ctx) if u.name == "alice")
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="nb", services=(("app", 8000),))
    created = actions.create_instance(console.ctx, alice, request)
    for _ in range(20):
        console.reconciler.drain()
        with console.ctx.sessions() as session:
            found = session.get(InstanceModel, created.id)
            if found is not None and found.status == InstanceStatus.RUNNING:
                return created.id
    raise AssertionError("the instance never ran")


def test_the_card_opens_shares_and_revokes_a_service(console: Platform) -> None:
    instance_id = _running_instance(console)
    alice = log_in(console, "alice")
    page = alice.client.get(f"/instances/{instance_id}").text
    assert f'hx-get="/instances/{instance_id}/services"' in page
    card = alice.client.get(f"/instances/{instance_id}/services").text
    assert f'href="/i/{instance_id}/app/"' in card
    assert 'data-action="start-jupyter"' in card  # nothing called jupyter is published

    shared = alice.post(f"/instances/{instance_id}/services/app/link")
    assert shared.status_code == 200
    found = LINK.search(shared.text)
    assert found, shared.text
    url = found.group(1)
    assert url.startswith(f"http://127.0.0.1/i/{instance_id}/app/?gpudock_token=gps_")
    token = url.split("gpudock_token=", 1)[1]
    assert published.target_for_link(console.ctx, token, instance_id, "app").port == 8000
    assert LINK.search(alice.client.get(f"/instances/{instance_id}/services").text) is None

    alice.post(f"/instances/{instance_id}/services/app/revoke")
    with pytest.raises(Unauthenticated):
        published.target_for_link(console.ctx, token, instance_id, "app")

    bob = log_in(console, "bob")
    assert bob.client.get(f"/instances/{instance_id}/services").status_code == 404
    assert bob.post(f"/instances/{instance_id}/services/app/link").status_code == 404


def test_publishing_removing_and_starting_jupyter_from_the_card(console: Platform) -> None:
    instance_id = _running_instance(console)
    alice = log_in(console, "alice")
    base = f"/instances/{instance_id}/services"

    bad = alice.post(f"{base}/expose", {"name": "web", "port": "http"})
    assert "bad port &#39;http&#39;" in bad.text
    taken = alice.post(f"{base}/expose", {"name": "app", "port": "9000"})
    assert "already publishes &#39;app&#39; on port 8000" in taken.text
    added = alice.post(f"{base}/expose", {"name": "web", "port": "9000"})
    assert 'data-service="web"' in added.text and 'id="services-error"' not in added.text

    removed = alice.post(f"{base}/app/remove")
    assert 'data-service="app"' not in removed.text and 'data-service="web"' in removed.text

    started = alice.post(f"{base}/jupyter/start")  # the fake's exec succeeds
    assert f'href="/i/{instance_id}/jupyter/"' in started.text
    assert "Open JupyterLab" in started.text and 'data-action="start-jupyter"' not in started.text
