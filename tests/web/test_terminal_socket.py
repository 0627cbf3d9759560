"""The browser terminal's WebSocket on the fake runtime (every exec echoes, like `cat`):
who may open it, reattaching with a byte offset, the grace period and the audit.
The real shell in a real container, in Chromium, is tests/web/test_terminal_browser.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from gpudock.db.models import SshSessionModel
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.sshgw.commands import login_shell
from gpudock.web.terminals import CLOSE_REPLACED, LOGIN_SHELL
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for
from tests.support.web import Browser, log_in, make_user

# log_in's clients talk to http://127.0.0.1, where their cookies belong
ORIGIN = {"origin": "http://127.0.0.1"}


def alice_instance(platform: Platform) -> str:
    alice = next(u for u in users.list_users(platform.ctx) if u.name == "alice")
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="train")
    created = instances.create_instance(platform.ctx, alice, request)
    platform.reconciler.drain()
    return created.id


def sessions(platform: Platform, instance_id: str) -> list[SshSessionModel]:
    admin = next(u for u in users.list_users(platform.ctx) if u.is_admin)
    return ssh_sessions.list_sessions(platform.ctx, admin, instance_id)


@contextmanager
def running(browser: Browser) -> Iterator[TestClient]:
    """The client with the app's lifespan on: one event loop, so shells outlive sockets."""
    with browser.client as client:
        yield client


def attached(socket: Any) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(socket.receive_text())
    assert message["type"] == "attached", message
    return message


def make_console(platform_factory: PlatformFactory, **settings: Any) -> Platform:
    platform = platform_factory(**settings)
    make_user(platform, "alice")
    make_user(platform, "bob")
    return platform


def test_only_the_owner_from_the_consoles_own_origin_opens_a_terminal(
    platform_factory: PlatformFactory,
) -> None:
    platform = make_console(platform_factory, rate_limit_terminal_address="4/minute")
    instance_id = alice_instance(platform)
    path = f"ws://127.0.0.1/instances/{instance_id}/terminal"
    alice, bob = log_in(platform, "alice"), log_in(platform, "bob")
    anonymous = TestClient(alice.client.app, base_url="http://127.0.0.1")

    def refused(client: TestClient, headers: dict[str, str]) -> int:
        with (
            pytest.raises(WebSocketDenialResponse) as denied,
            client.websocket_connect(path, headers=headers),
        ):
            pass
        return denied.value.status_code

    assert refused(anonymous, ORIGIN) == 401
    assert refused(bob.client, ORIGIN) == 404  # another tenant's instance: not found
    assert refused(bob.client, ORIGIN) == 404
    assert refused(alice.client, {"origin": "http://evil.example"}) == 403
    assert refused(alice.client, {}) == 403  # no Origin: no page of ours opened it
    with running(alice) as client, client.websocket_connect(path, headers=ORIGIN) as socket:
        assert attached(socket)["resumed"] is False
    # alice's app (each log_in is an app of its own): the 5th upgrade from one address
    assert refused(alice.client, ORIGIN) == 429

    rows = sessions(platform, instance_id)
    assert [(r.origin.value, r.outcome.value) for r in rows] == [
        ("web", "closed"),
        ("web", "refused"),
        ("web", "refused"),
    ]
    assert "'http://evil.example' refused: only pages of http://127.0.0.1" in rows[2].reason
    assert rows[0].key_fingerprint is None and rows[0].login == "train"


def test_a_page_reattaches_to_its_shell_and_gets_only_what_it_missed(
    platform_factory: PlatformFactory,
) -> None:
    platform = make_console(platform_factory)
    instance_id = alice_instance(platform)
    path = f"ws://127.0.0.1/instances/{instance_id}/terminal?cols=100&rows=30"
    alice = log_in(platform, "alice")
    with running(alice) as client:
        with client.websocket_connect(path, headers=ORIGIN) as socket:
            first = attached(socket)
            assert (first["offset"], first["resumed"]) == (0, False)
            socket.send_bytes("ls 数据\r".encode())
            assert socket.receive_bytes() == "ls 数据\r".encode()
        token, have = first["session"], len("ls 数据\r".encode())

        with client.websocket_connect(
            f"{path}&session={token}&offset={have}", headers=ORIGIN
        ) as socket:
            again = attached(socket)
            assert (again["session"], again["offset"], again["resumed"]) == (token, have, True)
            socket.send_bytes(b"more")
            assert socket.receive_bytes() == b"more"  # nothing replayed before it

            # a reload of the page has nothing: everything is replayed; the first socket
            # is taken over, like `tmux attach -d`
            with client.websocket_connect(
                f"{path}&session={token}&offset=0", headers=ORIGIN
            ) as reloaded:
                assert attached(reloaded)["offset"] == 0
                assert reloaded.receive_bytes() == "ls 数据\rmore".encode()
                with pytest.raises(WebSocketDisconnect) as closed:
                    socket.receive_bytes()
                assert closed.value.code == CLOSE_REPLACED
                reloaded.send_text(json.dumps({"type": "hangup"}))
                assert json.loads(reloaded.receive_text())["type"] == "exit"

        # the hung-up shell is gone: its token now opens a new one
        with client.websocket_connect(f"{path}&session={token}", headers=ORIGIN) as socket:
            assert attached(socket)["resumed"] is False

    rows = sessions(platform, instance_id)
    assert len(rows) == 2 and rows[1].reason == "closed from the console"
    assert (rows[1].bytes_in, rows[1].bytes_out) == (have + 4, have + 4)


def test_a_shell_nobody_reconnects_to_is_hung_up_after_the_grace_period(
    platform_factory: PlatformFactory,
) -> None:
    platform = make_console(platform_factory, terminal_reattach_grace_s=0)
    instance_id = alice_instance(platform)
    path = f"ws://127.0.0.1/instances/{instance_id}/terminal"
    alice = log_in(platform, "alice")
    with running(alice) as client:
        with client.websocket_connect(path, headers=ORIGIN) as socket:
            token = attached(socket)["session"]

        def closed() -> SshSessionModel | None:
            row = sessions(platform, instance_id)[0]
            return row if row.outcome.value == "closed" else None

        assert wait_for(closed, "the abandoned shell's row to close").reason == (
            "the browser did not reconnect within 0 s"
        )
        with client.websocket_connect(f"{path}?session={token}", headers=ORIGIN) as socket:
            assert attached(socket)["resumed"] is False


def test_the_terminal_runs_the_gateways_login_shell() -> None:
    assert login_shell() == LOGIN_SHELL
