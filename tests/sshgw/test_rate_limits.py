"""Rate limits at the SSH gateway, with the real OpenSSH client.

Past a limit the gateway closes the connection and audits a refused attempt
with the reason; other keys and other addresses go on working. The fake
runtime backs the instances (its exec streams echo like `cat`): what is under
test is the gateway's authentication, not the container. Each test starts its
own gateway with limits far below the defaults, so counts never leak between
tests, and none waits for a window to pass.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import InstanceModel, InstanceStatus, SshSessionModel
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.ssh import keys as ssh_keys
from gpudock.settings import Settings
from gpudock.sshgw.gateway import SshGateway
from tests.support.key_proof import add_with_proof
from tests.support.sshgw import DEADLINE_S, SSH_OPTIONS, GatewayThread, make_key, wait_for

HELLO = b"hello through the gateway\n"


@dataclass
class Gateway:
    platform: Platform
    thread: GatewayThread[SshGateway]
    keys: dict[str, Path]
    instance_ids: dict[str, str]  # owner → the id of their running instance

    def ssh(self, owner: str, *, source: str = "127.0.0.1") -> subprocess.CompletedProcess[bytes]:
        """Log in to OWNER's instance with OWNER's key from SOURCE; the instance echoes."""
        port = str(self.thread.gateway.port)
        argv = ["ssh", "-p", port, "-i", str(self.keys[owner]), "-b", source, *SSH_OPTIONS]
        argv += [f"{self.instance_ids[owner]}@127.0.0.1", "cat"]
        return subprocess.run(argv, input=HELLO, capture_output=True, timeout=DEADLINE_S)

    def refusals(self, text: str) -> list[SshSessionModel]:
        with self.platform.ctx.sessions() as session:
            rows = session.scalars(
                select(SshSessionModel).where(SshSessionModel.outcome == "refused")
            )
            return [r for r in rows if text in r.reason]


GatewayFactory = Callable[..., Gateway]


@pytest.fixture
def gateway_factory(tmp_path: Path) -> Iterator[GatewayFactory]:
    made: list[tuple[Platform, GatewayThread[SshGateway]]] = []

    def make(**limits: object) -> Gateway:
        settings = Settings(
            data_dir=tmp_path / f"data{len(made)}",
            simulate="1x4xA100-80GB",
            runtime="fake",
            image_pull="never",
            ssh_port=0,
            **limits,
        )
        platform = open_platform(settings, runtime=FakeRuntime())
        thread = GatewayThread(SshGateway(platform.ctx))
        made.append((platform, thread))
        gateway = Gateway(platform, thread, {}, {})
        for owner in ("alice", "bob"):
            user = users.create_user(platform.ctx, owner).user
            gateway.keys[owner] = make_key(tmp_path, f"{owner}{len(made)}")
            add_with_proof(platform.ctx, user, gateway.keys[owner])
            request = InstanceRequest(gpu_model=None, gpu_count=0, name="box")
            gateway.instance_ids[owner] = instances.create_instance(platform.ctx, user, request).id
        _run_until_running(platform, list(gateway.instance_ids.values()))
        thread.start()
        return gateway

    yield make
    for platform, thread in made:
        thread.stop()
        platform.close()


def _run_until_running(platform: Platform, instance_ids: list[str]) -> None:
    platform.reconciler.drain()
    with platform.ctx.sessions() as session:
        for instance_id in instance_ids:
            found = session.get(InstanceModel, instance_id)
            assert found is not None and found.status == InstanceStatus.RUNNING


def _assert_in(result: subprocess.CompletedProcess[bytes]) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout == HELLO


def _assert_cut_off(result: subprocess.CompletedProcess[bytes], why: str) -> None:
    """Disconnected with the reason and when to retry (ssh prints it), never let in."""
    assert result.returncode == 255
    assert result.stdout == b""
    message = result.stderr.decode()
    assert "Received disconnect" in message and why in message, message
    assert re.search(r"retry in \d+ s", message), message


def test_a_key_past_its_limit_is_cut_off_audited_and_other_keys_are_not(
    gateway_factory: GatewayFactory,
) -> None:
    gateway = gateway_factory(rate_limit_ssh_key="2/minute", rate_limit_ssh_address="100/minute")
    _assert_in(gateway.ssh("alice"))
    _assert_in(gateway.ssh("alice"))
    _assert_cut_off(gateway.ssh("alice"), "too many SSH attempts with one key")
    fingerprint = ssh_keys.parse_public_key(
        gateway.keys["alice"].with_suffix(".pub").read_text()
    ).fingerprint
    found = wait_for(
        lambda: gateway.refusals(f"too many SSH attempts with one key ({fingerprint})"),
        "the audited refusal of alice's key",
    )
    assert found[0].login == gateway.instance_ids["alice"]
    assert found[0].key_fingerprint == fingerprint
    assert found[0].client_address.startswith("127.0.0.1:")
    _assert_in(gateway.ssh("bob"))  # same address, another tenant's key


def test_an_address_past_its_limit_is_cut_off_audited_and_others_are_not(
    gateway_factory: GatewayFactory,
) -> None:
    gateway = gateway_factory(rate_limit_ssh_address="3/minute", rate_limit_ssh_key="100/minute")
    for owner in ("alice", "bob", "alice"):
        _assert_in(gateway.ssh(owner))
    # whichever key: the address is spent
    _assert_cut_off(gateway.ssh("bob"), "too many SSH connections from one address")
    found = wait_for(
        lambda: gateway.refusals("too many SSH connections from one address (127.0.0.1)"),
        "the audited refusal of the address",
    )
    assert found[0].login == gateway.instance_ids["bob"]
    _assert_in(gateway.ssh("bob", source="127.0.0.2"))  # another client address


def test_limits_can_be_switched_off(gateway_factory: GatewayFactory) -> None:
    gateway = gateway_factory(
        rate_limits_enabled=False, rate_limit_ssh_address="1/minute", rate_limit_ssh_key="1/minute"
    )
    for _ in range(3):
        _assert_in(gateway.ssh("alice"))
    assert gateway.refusals("rate limited") == []
