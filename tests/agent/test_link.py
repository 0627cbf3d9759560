"""Enrollment and the link, in one process: the real gateway and agents over TCP on
127.0.0.1 (asyncssh both ways), real keys, real SQLite."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from gpudock.agent import link as agent_link
from gpudock.agent.link import AgentStopped
from gpudock.db.models import LinkState
from gpudock.link.tokens import JoinToken
from gpudock.platform import Platform
from gpudock.runtime.transfer import RECEIVE_COMMAND
from gpudock.services.agents import hosts
from gpudock.services.agents.hosts import AgentHost
from tests.support.agents import LinkRig, join_parts
from tests.support.clocks import FakeClock
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

H200_UUID_PREFIX = "GPU-"


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2)


def _host(platform: Platform, name: str) -> AgentHost:
    return hosts.get_host(platform.ctx, name)


def _linked(rig: LinkRig, platform: Platform, agent: str, host: str) -> None:
    """The server shows the link up and the agent has saved its welcome (the server
    records the enrollment just before it sends the welcome)."""
    wait_for(
        lambda: (
            _host(platform, host).link_state is LinkState.UP
            and (rig.state_dir(agent) / "server.json").exists()
        ),
        f"agent {agent} linked as {host}",
    )


def _refusal(running: Future[None]) -> str:
    """The message the agent stopped with (it must stop: retrying cannot help)."""
    with pytest.raises(AgentStopped) as stopped:
        running.result(timeout=30)
    return stopped.value.message


def test_an_agent_joins_reports_its_gpus_and_heartbeats(rig: LinkRig, platform: Platform) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    assert _host(platform, "box-1").link_state is LinkState.NONE
    rig.join("a", url, token)
    joined = wait_for(
        lambda: (h := _host(platform, "box-1")).link_state is LinkState.UP and h, "a link up"
    )
    assert joined.state.value == "active"
    assert [gpu.model for gpu in joined.gpus] == ["H200-140GB"]
    assert joined.gpus[0].uuid.startswith(H200_UUID_PREFIX)
    assert (joined.engine_version, joined.driver_version) == ("fake", "570.124.06")
    first = joined.last_heartbeat_at
    assert first is not None
    wait_for(
        lambda: (_host(platform, "box-1").last_heartbeat_at or first) > first, "a later heartbeat"
    )


def test_a_token_is_good_once(rig: LinkRig, platform: Platform) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token)
    wait_for(lambda: _host(platform, "box-1").link_state is LinkState.UP, "the first agent's link")
    message = _refusal(rig.join("b", url, token))
    assert "the join token was used already" in message
    assert "gpudock hosts add NAME" in message
    assert not (rig.state_dir("b") / "server.json").exists()  # nothing to `agent run` from


def test_bad_and_expired_tokens_are_refused(rig: LinkRig, platform: Platform) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    parsed = JoinToken.parse(token)
    forged = str(JoinToken(parsed.token_id, "0" * 32, parsed.server_fingerprint))
    assert "the join token is not valid" in _refusal(rig.join("forger", url, forged))
    clock = FakeClock(platform.ctx.clock())
    platform.ctx.clock = clock
    url, token = join_parts(hosts.add_host(platform.ctx, "box-2").join_command)
    clock.advance(platform.ctx.settings.agent_join_token_ttl_s + 1)
    assert "the join token expired at" in _refusal(rig.join("late", url, token))
    assert _host(platform, "box-2").state.value == "pending"


def test_an_agent_refuses_a_server_that_proves_another_key(
    rig: LinkRig, platform: Platform
) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    parsed = JoinToken.parse(token)
    other = str(JoinToken(parsed.token_id, parsed.secret, "f" * 64))  # another server's key
    message = _refusal(rig.join("a", url, other))
    assert "not the one this agent pins" in message
    assert _host(platform, "box-1").state.value == "pending"  # the secret never left


def test_removing_a_host_disconnects_its_agent_and_refuses_it_after(
    rig: LinkRig, platform: Platform
) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    running = rig.join("a", url, token)
    _linked(rig, platform, "a", "box-1")
    host_id = _host(platform, "box-1").id
    hosts.remove_host(platform.ctx, "box-1")
    assert "host 'box-1' was removed" in _refusal(running)
    wait_for(lambda: host_id not in rig.gateway.connected_hosts(), "the link closed")
    assert "not enrolled with this server" in _refusal(rig.rerun("a"))


def test_a_stopped_agent_is_seen_down_and_reconnects_when_run_again(
    rig: LinkRig, platform: Platform
) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token)
    _linked(rig, platform, "a", "box-1")
    rig.halt("a")
    wait_for(lambda: _host(platform, "box-1").link_state is LinkState.DOWN, "the link down")
    rig.rerun("a")
    wait_for(lambda: _host(platform, "box-1").link_state is LinkState.UP, "the link up again")


def test_a_channel_whose_handler_fails_leaves_the_link_and_its_other_sessions_up(
    rig: LinkRig, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token)
    _linked(rig, platform, "a", "box-1")
    host_id = _host(platform, "box-1").id

    async def fails(*_args: object) -> None:
        raise RuntimeError("a bug in one handler")

    monkeypatch.setattr(agent_link.volume_copy, "serve", fails)
    conn = rig.gateway._links[host_id]  # the server's end of the link

    async def open_a_copy() -> int | None:
        process = await conn.create_process(RECEIVE_COMMAND + "{}", encoding=None)
        await process.wait_closed()
        return process.exit_status

    assert rig.run(open_a_copy()) == 1  # that channel fails, and says so
    beat = _host(platform, "box-1").last_heartbeat_at
    wait_for(lambda: _host(platform, "box-1").last_heartbeat_at != beat, "a heartbeat after")
    assert rig.gateway._links[host_id] is conn  # the same connection: never dropped
    assert platform.ctx.hosts is not None
    assert platform.ctx.hosts.for_host(host_id).engine_info().server_version
