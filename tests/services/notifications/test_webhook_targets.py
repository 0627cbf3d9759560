"""Webhooks go to public addresses only, unless the operator allows the
server's own network: a user's webhook must not be a way to probe it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.errors import InvalidRequest
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.notifications import endpoints
from gpudock.services.notifications.senders import (
    Outgoing,
    SendFailed,
    check_public_target,
    send_webhook,
)
from gpudock.settings import Settings
from tests.services.notifications.receivers import webhook_receiver

# Literal addresses and /etc/hosts names only: checking them asks no DNS server.
PRIVATE = [
    "http://127.0.0.1:9/hook",
    "http://[::1]:9/hook",
    "http://10.1.2.3/hook",
    "http://192.168.0.7/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[fd00::1]/hook",
    "http://localhost:9/hook",
]


def _platform(tmp_path: Path, **overrides: object) -> Platform:
    settings = Settings(
        data_dir=tmp_path / "d",
        simulate="1x1xA100-80GB",
        runtime="fake",
        image_pull="never",
        **overrides,  # type: ignore[arg-type]
    )
    return open_platform(settings, runtime=FakeRuntime())


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    made = _platform(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("url", PRIVATE)
def test_a_private_address_is_refused_at_send_time(url: str) -> None:
    with pytest.raises(SendFailed, match="GPUDOCK_WEBHOOK_PRIVATE_TARGETS=true"):
        check_public_target(url)


def test_a_public_address_passes() -> None:
    check_public_target("http://93.184.215.14/hook")  # a literal: nothing is resolved


@pytest.mark.parametrize(
    "url", [u for u in PRIVATE if "localhost" not in u] + ["http://a.localhost/"]
)
def test_registering_a_private_target_says_what_to_do(platform: Platform, url: str) -> None:
    alice = users.create_user(platform.ctx, "alice").user
    with pytest.raises(InvalidRequest, match="public addresses only") as refused:
        endpoints.create_webhook(platform.ctx, alice, url, [])
    assert refused.value.field == "url"
    assert endpoints.create_webhook(platform.ctx, alice, "https://hooks.example/a", [])


def test_no_request_reaches_a_loopback_receiver_unless_allowed(tmp_path: Path) -> None:
    with webhook_receiver() as receiver:
        outgoing = Outgoing("d1", "webhook", "balance.low", b"{}", "s", "t", receiver.url, "x")
        with pytest.raises(SendFailed, match="own network"):
            send_webhook(outgoing, 5.0)
        assert receiver.received == []
        assert send_webhook(outgoing, 5.0, allow_private=True).startswith("HTTP 2")
        assert len(receiver.received) == 1
    allowed = _platform(tmp_path, webhook_private_targets=True)
    try:
        alice = users.create_user(allowed.ctx, "alice").user
        assert endpoints.create_webhook(allowed.ctx, alice, "http://127.0.0.1:9/hook", [])
    finally:
        allowed.close()
