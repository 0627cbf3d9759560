"""The console's notifications page (webhook secret shown once, the list, the
delivery log) and an instance's auto-stop fragment; another user's are 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from gpudock.db.models import UserModel
from gpudock.platform import Platform
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.instances.auto_stop import AutoStopPolicy, auto_stop_pass
from tests.support.web import log_in


def test_a_webhook_is_added_with_its_secret_shown_once_and_removed(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    data = {"url": "https://example.com/alices-hook", "kinds": "instance.stopped"}
    added = alice.post("/notifications/webhooks", data)
    assert added.status_code == 201, added.text
    assert 'id="new-secret">whsec_' in added.text
    page = alice.client.get("/notifications").text
    assert "https://example.com/alices-hook" in page and "whsec_" not in page
    webhook_id = page.split('data-webhook="', 1)[1].split('"', 1)[0]
    assert "https://example.com/alices-hook" not in bob.client.get("/notifications").text
    assert bob.post(f"/notifications/webhooks/{webhook_id}/remove").status_code == 404
    assert alice.post(f"/notifications/webhooks/{webhook_id}/remove").status_code == 303
    assert "https://example.com/alices-hook" not in alice.client.get("/notifications").text
    bad = alice.post("/notifications/webhooks", {"url": "ftp://x"})
    assert bad.status_code == 422 and "bad webhook URL" in bad.text
    assert "GPUDOCK_SMTP_HOST" in alice.client.get("/notifications").text  # email is off here


def test_auto_stop_is_changed_on_the_instance_page_and_its_stop_listed(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    with console.ctx.sessions() as session:
        owner = session.scalars(select(UserModel).where(UserModel.name == "alice")).one()
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="nb")
    instance_id = actions.create_instance(console.ctx, owner, request).id
    console.reconciler.drain()
    assert (
        'hx-get="/instances/' + instance_id + '/auto-stop"'
        in alice.client.get(f"/instances/{instance_id}").text
    )
    assert "Runs until you stop it." in alice.client.get(f"/instances/{instance_id}/auto-stop").text
    assert bob.client.get(f"/instances/{instance_id}/auto-stop").status_code == 404
    form = {"idle_minutes": "45", "idle_below": "3", "stop_at": "", "stop_on_exit": "on"}
    assert bob.post(f"/instances/{instance_id}/auto-stop", form).status_code == 404
    saved = alice.post(f"/instances/{instance_id}/auto-stop", form)
    assert saved.status_code == 303, saved.text
    fragment = alice.client.get(f"/instances/{instance_id}/auto-stop").text
    assert "stops idle 45 min (GPUs below 3 %), when the main process exits" in fragment
    wrong = alice.post(f"/instances/{instance_id}/auto-stop", {"idle_minutes": "1x"})
    assert wrong.status_code == 422 and "whole number of minutes" in wrong.text
    zh = alice.client.get("/notifications", cookies={"gpudock_lang": "zh-CN"}).text
    assert "还没有通知" in zh
    actions.change_auto_stop(console.ctx, owner, instance_id, AutoStopPolicy(stop_after_s=60))
    later = datetime.now(UTC) + timedelta(minutes=2)
    console.ctx.clock = lambda: later  # the server's clock, injected: two minutes on
    assert auto_stop_pass(console.ctx).stopped == [instance_id]
    listed = alice.client.get("/notifications").text
    assert 'data-kind="instance.stopped"' in listed and "instance nb auto-stop: stopped" in listed
    assert 'data-kind="instance.stopped"' not in bob.client.get("/notifications").text
