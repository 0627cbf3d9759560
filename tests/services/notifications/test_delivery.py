"""Deliveries to real receivers on 127.0.0.1: a signed webhook retried after a
500 and never sent to another tenant, an email through a real SMTP server.
The clock is injected: a retry is due because the test moves time, not waits."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.instances.auto_stop import auto_stop_pass
from gpudock.services.notifications import signing
from gpudock.settings import Settings
from tests.services.notifications.receivers import (
    MailReceiver,
    smtp_receiver,
    webhook_receiver,
)
from tests.support.clocks import FakeClock
from tests.support.factories import Tenant, make_tenant

API = "/api/v1"


@pytest.fixture
def mail() -> Iterator[MailReceiver]:
    with smtp_receiver() as receiver:
        yield receiver


@pytest.fixture
def world(tmp_path: Path, mail: MailReceiver) -> Iterator[tuple[Platform, TestClient, FakeClock]]:
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "d",
        simulate="1x2xA100-80GB",
        runtime="fake",
        image_pull="never",
        smtp_host="127.0.0.1",
        smtp_port=mail.port,
        smtp_starttls=False,
        smtp_from="gpudock@lab.example",
        webhook_private_targets=True,  # the receivers listen on 127.0.0.1
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        yield platform, TestClient(create_app(platform, run_reconciler=False)), clock
    finally:
        platform.close()


def stop_one_instance(
    platform: Platform, client: TestClient, clock: FakeClock, tenant: Tenant
) -> str:
    """A real cause: an instance that stops after a minute."""
    body = {"name": "job", "gpu_model": "A100-80GB", "auto_stop": {"stop_after_s": 60}}
    made = client.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert made.status_code == 201, made.text
    assert made.json()["auto_stop"]["stop_at"] is not None
    platform.reconciler.drain()
    clock.advance(61)
    assert auto_stop_pass(platform.ctx).stopped == [made.json()["id"]]
    return str(made.json()["id"])


def deliver(platform: Platform) -> None:
    platform.reconciler.make_due("notifications")
    platform.reconciler.notify_tick()


def test_webhook_is_signed_retried_after_a_500_and_only_its_owners(
    world: tuple[Platform, TestClient, FakeClock],
) -> None:
    platform, client, clock = world
    alice, bob = make_tenant(platform, "alice"), make_tenant(platform, "bob")
    assert client.post(f"{API}/webhooks", json={"url": "http://x"}).status_code == 401
    with webhook_receiver() as alices, webhook_receiver() as bobs:
        made = client.post(f"{API}/webhooks", json={"url": alices.url}, headers=alice.headers)
        assert made.status_code == 201, made.text
        secret, hook_id = made.json()["secret"], made.json()["id"]
        assert "secret" not in client.get(f"{API}/webhooks", headers=alice.headers).json()[0]
        bob_hook = client.post(f"{API}/webhooks", json={"url": bobs.url}, headers=bob.headers)
        assert bob_hook.status_code == 201
        for call in (client.get, client.delete):
            path = f"{API}/webhooks/{hook_id}" + ("/deliveries" if call == client.get else "")
            assert call(path, headers=bob.headers).status_code == 404  # not bob's

        instance_id = stop_one_instance(platform, client, clock, alice)
        alices.answers.append(500)
        deliver(platform)
        [log] = client.get(f"{API}/webhooks/{hook_id}/deliveries", headers=alice.headers).json()
        assert (log["state"], log["attempts"], log["last_result"]) == ("pending", 1, "HTTP 500")
        deliver(platform)  # the backoff has not passed: nothing is sent
        assert len(alices.received) == 1
        clock.advance(31)
        deliver(platform)
        [log] = client.get(f"{API}/webhooks/{hook_id}/deliveries", headers=alice.headers).json()
        assert (log["state"], log["attempts"], log["last_result"]) == ("delivered", 2, "HTTP 204")

    first, second = alices.received
    assert first.headers[signing.DELIVERY_HEADER] == second.headers[signing.DELIVERY_HEADER]
    assert first.headers[signing.DELIVERY_HEADER] == log["id"]
    for got in (first, second):
        stamp, signed = got.headers[signing.TIMESTAMP_HEADER], got.headers[signing.SIGNATURE_HEADER]
        assert signing.verify(secret, stamp, got.body, signed, time.time())
        assert not signing.verify(secret, stamp, got.body + b" ", signed, time.time())
    document = json.loads(second.body)
    assert document["kind"] == "instance.stopped" and document["user"]["name"] == "alice"
    assert document["data"]["cause"] == "time"
    assert document["data"]["instance"]["id"] == instance_id
    assert bobs.received == []  # bob's webhook never hears of alice's instance
    assert client.get(f"{API}/notifications/deliveries", headers=bob.headers).json() == []
    assert client.get(f"{API}/notifications", headers=bob.headers).json() == []
    [note] = client.get(f"{API}/notifications", headers=alice.headers).json()
    assert note["kind"] == "instance.stopped" and note["instance_id"] == instance_id


def test_email_goes_through_the_operators_smtp_server(
    world: tuple[Platform, TestClient, FakeClock], mail: MailReceiver
) -> None:
    platform, client, clock = world
    carol = make_tenant(platform, "carol")
    assert client.get(f"{API}/notifications/email", headers=carol.headers).status_code == 404
    bad = client.put(f"{API}/notifications/email", json={"address": "nope"}, headers=carol.headers)
    assert bad.status_code == 422 and "bad email address" in bad.text
    body = {"address": "carol@lab.example", "kinds": ["instance.stopped"]}
    assert client.put(f"{API}/notifications/email", json=body, headers=carol.headers).is_success
    stop_one_instance(platform, client, clock, carol)
    deliver(platform)
    [message] = mail.messages
    assert mail.recipients == [["carol@lab.example"]]
    assert message["From"] == "gpudock@lab.example"
    assert "instance job auto-stop: stopped" in message["Subject"]
    [log] = client.get(f"{API}/notifications/deliveries", headers=carol.headers).json()
    assert log["state"] == "delivered" and log["channel"] == "email"
    assert message[signing.DELIVERY_HEADER] == log["id"]


def test_a_webhook_that_keeps_failing_is_given_up_after_the_last_attempt(
    world: tuple[Platform, TestClient, FakeClock],
) -> None:
    platform, client, clock = world
    dave = make_tenant(platform, "dave")
    with webhook_receiver() as receiver:
        receiver.answers.extend([503] * 20)
        client.post(f"{API}/webhooks", json={"url": receiver.url}, headers=dave.headers)
        stop_one_instance(platform, client, clock, dave)
        for _ in range(platform.ctx.settings.notify_max_attempts + 2):
            deliver(platform)
            clock.advance(3601)
    assert len(receiver.received) == platform.ctx.settings.notify_max_attempts
    [log] = client.get(f"{API}/notifications/deliveries", headers=dave.headers).json()
    assert log["state"] == "failed" and log["last_result"] == "HTTP 503"
