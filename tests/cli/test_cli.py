"""The CLI end to end: CliRunner → HTTP → a real gpudock server (fake runtime)."""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpudock.api.schemas import InstancePublic
from gpudock.cli.client import ApiClient, CliError
from gpudock.cli.commands.waiting import Waiter
from tests.support.cli import Invoke, LiveServer

Unique = Callable[[str], str]


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- GPUs and hosts ------------------------------------------------------------------------


def test_gpus_table_lists_models_with_free_of_total(gpudock: Invoke) -> None:
    result = gpudock("gpus")
    assert result.exit_code == 0, result.output
    for expected in ("A100-80GB", "RTX4090-24GB", "80 GB", "24 GB", "MAX PER HOST", "—"):
        assert expected in result.stdout


def test_gpus_json_is_the_apis_list(gpudock: Invoke) -> None:
    models = {m["model"]: m for m in _json(gpudock("gpus", "--json"))}
    assert set(models) == {"A100-80GB", "RTX4090-24GB"}
    a100 = models["A100-80GB"]
    assert (a100["total"], a100["hosts"], a100["max_per_host"]) == (4, 1, 4)
    assert a100["memory_mb"] == 80 * 1024
    assert a100["price_per_hour"] is None


def test_hosts_needs_an_admin(gpudock: Invoke, unique: Unique) -> None:
    token = _json(gpudock("users", "create", unique("plain"), "--json"))["token"]
    assert gpudock("hosts", token=token).exit_code == 1
    hosts = _json(gpudock("hosts", "--json"))
    assert sorted(len(h["gpus"]) for h in hosts) == [2, 4]
    assert "RTX4090-24GB" in gpudock("hosts").stdout


# -- users and tokens ----------------------------------------------------------------------


def test_users_create_prints_a_token_that_works(gpudock: Invoke, unique: Unique) -> None:
    name = unique("alice")
    created = gpudock("users", "create", name)
    assert created.exit_code == 0, created.output
    token = next(line for line in created.stdout.splitlines() if line.startswith("gpd_"))
    assert "not shown again" in created.stderr

    me = gpudock("whoami", token=token)
    assert me.exit_code == 0, me.output
    assert name in me.stdout and "(admin)" not in me.stdout
    assert _json(gpudock("whoami", "--json", token=token))["name"] == name
    assert name in {u["name"] for u in _json(gpudock("users", "list", "--json"))}


def test_users_create_admin_json(gpudock: Invoke, unique: Unique) -> None:
    created = _json(gpudock("users", "create", unique("root"), "--admin", "--json"))
    assert created["is_admin"] is True
    assert _json(gpudock("users", "list", "--json", token=created["token"]))


def test_wrong_token_exits_1_with_the_login_hint(gpudock: Invoke) -> None:
    result = gpudock("gpus", token="gpd_not-a-real-token")
    assert result.exit_code == 1
    assert "gpudock login URL --token T" in result.stderr
    assert "GPUDOCK_TOKEN" in result.stderr


def test_no_token_exits_1_with_the_login_hint(gpudock: Invoke) -> None:
    result = gpudock("instances", "list", token=None)
    assert result.exit_code == 1
    assert "no API token" in result.stderr
    assert "gpudock login" in result.stderr


# -- instances -----------------------------------------------------------------------------


def test_instance_lifecycle_with_wait(gpudock: Invoke, unique: Unique) -> None:
    name = unique("train")
    created = _json(
        gpudock(
            "instances", "create", "--gpu", "A100-80GB", "--count", "2", "--name", name,
            "--env", "MODE=test", "--wait", "--timeout", "30", "--json",
        )
    )  # fmt: skip
    assert created["status"] == "running"
    assert created["name"] == name and len(created["gpus"]) == 2 and created["host"]
    holders = [g["instance_id"] for h in _json(gpudock("hosts", "--json")) for g in h["gpus"]]
    assert holders.count(created["id"]) == 2

    shown = gpudock("instances", "show", name)
    assert shown.exit_code == 0, shown.output
    for expected in (created["id"], "2 × A100-80GB", created["gpus"][0], created["host"]):
        assert expected in shown.stdout
    assert "pending → creating" in shown.stdout and "Events" in shown.stdout

    # restart first: the server answers 409 "busy" while the reconciler still holds the row's
    # lease, which it does for a moment after the status becomes running.
    for verb, status in (("restart", "running"), ("stop", "stopped"), ("start", "running")):
        after = _json(gpudock("instances", verb, name, "--wait", "--timeout", "30", "--json"))
        assert after["status"] == status, (verb, after)
    assert _json(gpudock("instances", "stop", name, "--wait", "--json"))["gpus"] == []

    deleted = gpudock("instances", "delete", name, "--yes", "--wait", "--timeout", "30")
    assert deleted.exit_code == 0, deleted.output
    assert "Deleted" in deleted.stdout
    assert _json(gpudock("instances", "show", created["id"], "--json"))["status"] == "deleted"
    assert name not in {i["name"] for i in _json(gpudock("instances", "list", "--json"))}


def test_instances_list_table(gpudock: Invoke, unique: Unique) -> None:
    name = unique("listed")
    created = _json(gpudock("instances", "create", "--count", "0", "--name", name, "--json"))
    assert created["gpu_count"] == 0 and created["gpu_model"] is None
    listed = gpudock("instances", "list")
    assert listed.exit_code == 0, listed.output
    assert name in listed.stdout and "no GPU" in listed.stdout


def test_no_gpu_instance_runs(gpudock: Invoke, unique: Unique) -> None:
    result = gpudock("instances", "create", "--count", "0", "--name", unique("cpu"), "--wait")
    assert result.exit_code == 0, result.output
    assert "running" in result.stdout and "no GPU" in result.stdout


def test_delete_asks_first(gpudock: Invoke, unique: Unique) -> None:
    name = unique("keep")
    _json(gpudock("instances", "create", "--count", "0", "--name", name, "--json"))
    refused = gpudock("instances", "delete", name, input="n\n")
    assert refused.exit_code == 1
    assert _json(gpudock("instances", "show", name, "--json"))["desired_state"] == "running"
    accepted = gpudock("instances", "delete", name, "--wait", input="y\n")
    assert accepted.exit_code == 0, accepted.output


def test_unknown_instance_exits_1(gpudock: Invoke) -> None:
    result = gpudock("instances", "show", "no-such-instance")
    assert result.exit_code == 1
    assert "no instance 'no-such-instance'" in result.stderr


def test_unknown_gpu_model_names_the_allowed_ones(gpudock: Invoke) -> None:
    result = gpudock("instances", "create", "--gpu", "H100-80GB", "--count", "1")
    assert result.exit_code == 1
    assert "unknown GPU model 'H100-80GB'" in result.stderr
    assert "A100-80GB, RTX4090-24GB" in result.stderr


def test_bad_env_format_is_a_usage_error(gpudock: Invoke) -> None:
    result = gpudock("instances", "create", "--gpu", "A100-80GB", "--env", "NOEQUALS")
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr


def test_gpu_model_is_required_with_gpus(gpudock: Invoke) -> None:
    result = gpudock("instances", "create", "--count", "2")
    assert result.exit_code == 2
    assert "--gpu" in result.stderr


# -- connection and configuration -----------------------------------------------------------


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A port bound but not listening: connections to it are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}"


def test_unreachable_server_says_to_start_it(gpudock: Invoke, dead_url: str) -> None:
    result = gpudock("gpus", url=dead_url)
    assert result.exit_code == 1
    assert f"cannot reach the gpudock server at {dead_url}" in result.stderr
    assert "is `gpudock server` running?" in result.stderr


def test_login_saves_a_private_config_that_env_overrides(
    gpudock: Invoke, live_server: LiveServer, config_home: Path
) -> None:
    logged_in = gpudock("login", live_server.url, "--token", live_server.admin_token)
    assert logged_in.exit_code == 0, logged_in.output
    path = config_home / "gpudock" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "url": live_server.url,
        "token": live_server.admin_token,
    }

    from_file = gpudock("whoami", url=None, token=None)
    assert from_file.exit_code == 0, from_file.output
    assert "admin" in from_file.stdout and str(path) in from_file.stdout

    overridden = gpudock("whoami", url=None, token="gpd_wrong")
    assert overridden.exit_code == 1
    assert "gpudock login" in overridden.stderr


def test_login_with_a_bad_token_saves_nothing(
    gpudock: Invoke, live_server: LiveServer, config_home: Path
) -> None:
    result = gpudock("login", live_server.url, "--token", "gpd_wrong", url=None, token=None)
    assert result.exit_code == 1
    assert not (config_home / "gpudock" / "config.json").exists()


def test_login_rejects_a_url_without_a_scheme(gpudock: Invoke) -> None:
    result = gpudock("login", "localhost:8080", "--token", "gpd_x")
    assert result.exit_code == 2
    assert "bad server URL" in result.stderr


def test_env_url_does_not_get_the_saved_token(
    gpudock: Invoke, live_server: LiveServer, dead_url: str
) -> None:
    assert gpudock("login", live_server.url, "--token", live_server.admin_token).exit_code == 0
    result = gpudock("whoami", url=dead_url, token=None)
    assert result.exit_code == 1
    assert "no API token" in result.stderr


# -- local commands -------------------------------------------------------------------------


def test_server_with_a_bad_fleet_spec_is_a_usage_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpudock.cli.main import app

    args = ["server", "--data-dir", str(tmp_path), "--simulate", "3xA100"]
    result = CliRunner().invoke(app, args, env={"GPUDOCK_RUNTIME": "fake"})
    assert result.exit_code == 2
    assert "bad fleet spec part '3xA100'" in result.stderr


def test_server_with_a_bad_port_is_a_usage_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpudock.cli.main import app

    args = ["server", "--data-dir", str(tmp_path), "--port", "70000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--port or GPUDOCK_PORT" in result.stderr


def test_build_base_without_an_engine_exits_1(gpudock: Invoke, dead_url: str) -> None:
    engine = dead_url.replace("http://", "tcp://")
    result = gpudock("images", "build-base", "--docker-host", engine)
    assert result.exit_code == 1
    assert "Docker Engine" in result.stderr


# -- waiting, with a fake clock ---------------------------------------------------------------


def _instance(status: str, desired: str = "running", reason: str = "") -> dict[str, Any]:
    """An instance as the server answers for it."""
    return {
        "id": "i-0123456789",
        "name": "w",
        "user_id": "u-admin",
        "status": status,
        "status_reason": reason,
        "desired_state": desired,
        "gpu_model": "A100-80GB",
        "gpu_count": 1,
        "gpus": [],
        "host": None,
        "image": "gpudock/base:bookworm",
        "cpu": 8.0,
        "memory_gb": 32,
        "disk_gb": 50,
        "system_disk_gb": 30,
        "container_id": None,
        "created_at": "2026-12-01T10:00:00Z",
        "updated_at": "2026-12-01T10:00:00Z",
    }


def _seen(status: str, desired: str = "running", reason: str = "") -> InstancePublic:
    return InstancePublic.model_validate(_instance(status, desired, reason))


def _waiter(answers: list[dict[str, Any]], timeout_s: float) -> Waiter:
    """A Waiter whose server answers `answers` in turn (the last one forever),
    holding each answer that is no change for the wait's `timeout_s`, as the
    server does (on the Waiter's clock)."""
    now = [0.0]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/instances/i-0123456789/wait"
        seen = request.url.params["changed_from"]
        while True:  # an answer that is no change is not sent while a later one is due
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            unchanged = f"{answer['status']}|{answer['status_reason']}" == seen
            if not unchanged or answer is answers[-1]:
                break
        if unchanged:
            now[0] += float(request.url.params["timeout_s"])  # nothing came: held that long
        return httpx.Response(200, json=answer)

    client = ApiClient("http://gpudock.test", "gpd_x", transport=httpx.MockTransport(handler))
    return Waiter(client, timeout_s, quiet=True, clock=lambda: now[0])


def test_wait_returns_once_the_target_status_is_reached() -> None:
    answers = [_instance("creating"), _instance("creating"), _instance("running")]
    waiter = _waiter(answers, timeout_s=10)
    assert waiter.wait(_seen("pending"), "running").status == "running"


def test_wait_times_out_saying_what_it_waits_for() -> None:
    waiter = _waiter([_instance("pending", reason="waiting for 4 × A100-80GB")], timeout_s=1)
    with pytest.raises(CliError) as caught:
        waiter.wait(_seen("pending"), "running")
    assert caught.value.exit_code == 1
    assert caught.value.message == (
        "timed out after 1 s waiting for instance w to be running; "
        "it is still pending (waiting for 4 × A100-80GB)"
    )


def test_wait_stops_at_a_failure_with_its_reason() -> None:
    waiter = _waiter([_instance("failed", "stopped", "image exploded")], timeout_s=10)
    with pytest.raises(CliError, match="instance w failed: image exploded"):
        waiter.wait(_seen("creating"), "running")


def test_wait_for_a_deletion_accepts_a_404() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "gone"}})

    client = ApiClient("http://gpudock.test", "gpd_x", transport=httpx.MockTransport(handler))
    waiter = Waiter(client, 10, quiet=True, clock=lambda: 0.0)
    assert waiter.wait(_seen("deleting", "deleted"), "deleted").id == "i-0123456789"
