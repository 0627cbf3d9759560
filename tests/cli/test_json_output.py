"""`--json` prints exactly what the server answered, for every listing and view.

The CLI parses each answer into the server's response model and prints that model;
these tests compare its output with the answer's own bytes, as a proxy between the
two recorded them. The server's clock is the test's, so that a charge covers a
known period.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpudock.cli.main import app
from gpudock.platform import open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.settings import Settings
from tests.support.cli import FLEET, Invoke, LiveServer, RecordingProxy, serving
from tests.support.clocks import T0, FakeClock
from tests.support.key_proof import make_key

RUN_S = 90

LISTINGS = [
    ("whoami",),
    ("gpus",),
    ("hosts",),
    ("users", "list"),
    ("users", "list", "--all"),
    ("tokens", "list"),
    ("tokens", "list", "--all"),
    ("instances", "list"),
    ("instances", "show", "json-box"),
    ("keys", "list"),
    ("images", "list"),
    ("images", "list", "--gpu", "RTX4090-24GB"),
    ("billing", "balance"),
    ("billing", "usage"),
    ("billing", "prices"),
    ("admin", "gpus", "faults"),
    ("admin", "reliability"),
]


def _json_time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _indented(answer: Any) -> str:
    """What `--json` printed before the CLI parsed answers: the JSON as it came."""
    return json.dumps(answer, indent=2, ensure_ascii=False) + "\n"


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[LiveServer]:
    """The conftest's server, on the test's clock (the `gpudock` fixture talks to this one)."""
    data_dir = tmp_path_factory.mktemp("gpudock-data")
    settings = Settings(data_dir=data_dir, simulate=FLEET, runtime="fake", image_pull="never")
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    with serving(platform) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(live_server: LiveServer) -> Iterator[RecordingProxy]:
    with RecordingProxy(live_server.url) as recording:
        yield recording


@pytest.fixture(scope="module")
def history(
    live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory, clock: FakeClock
) -> None:
    """Something in every listing: prices, a top-up and a charge, tokens (one
    revoked), a deleted user, a stopped instance, an SSH key and a GPU fault."""
    keys = tmp_path_factory.mktemp("keys")
    env = {
        "GPUDOCK_URL": live_server.url,
        "GPUDOCK_TOKEN": live_server.admin_token,
        "XDG_CONFIG_HOME": str(keys / "config"),
    }
    runner = CliRunner()

    def admin(*args: str) -> str:
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    admin("admin", "prices", "set", "A100-80GB", "3.6")
    admin("admin", "topup", "admin", "100", "--key", "json-output-1")
    admin("tokens", "create", "json-laptop", "--expires", "90d")
    admin("tokens", "create", "json-old")
    admin("tokens", "revoke", "json-old")
    admin("users", "create", "json-gone")
    admin("users", "delete", "json-gone", "--yes")
    admin("instances", "create", "--gpu", "A100-80GB", "--name", "json-box", "--wait")
    clock.advance(RUN_S)
    admin("instances", "stop", "json-box", "--wait")
    admin("keys", "add", str(make_key(keys, "json")))
    hosts = json.loads(admin("hosts", "--json"))
    free = next(g["uuid"] for h in hosts for g in h["gpus"] if g["instance_id"] is None)
    admin("admin", "gpus", "fault", free, "--xid", "48")


@pytest.mark.parametrize("args", LISTINGS, ids=" ".join)
def test_json_is_the_servers_answer(
    gpudock: Invoke, proxy: RecordingProxy, history: None, args: tuple[str, ...]
) -> None:
    proxy.answers.clear()
    result = gpudock(*args, "--json", url=proxy.url)
    assert result.exit_code == 0, result.output
    [answer] = proxy.answers
    assert answer.status == 200
    assert result.stdout == _indented(json.loads(answer.body))


def test_ledger_json_is_the_servers_pages_joined(
    gpudock: Invoke, proxy: RecordingProxy, history: None
) -> None:
    proxy.answers.clear()
    result = gpudock("billing", "ledger", "--json", url=proxy.url)
    assert result.exit_code == 0, result.output
    pages = [json.loads(answer.body) for answer in proxy.answers]
    lines = [line for page in pages for line in page["lines"]]
    assert result.stdout == _indented({"currency": pages[0]["currency"], "lines": lines})
    # a charge covers a period: its bounds go out as "from" and "to", and come back
    charged = [line for line in lines if line["kind"] != "topup"]
    assert [(line["from"], line["to"]) for line in charged] == [
        (_json_time(T0), _json_time(T0 + timedelta(seconds=RUN_S)))
    ]


def test_validate_json_is_the_servers_report(
    gpudock: Invoke, proxy: RecordingProxy, tmp_path: Path
) -> None:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(
        json.dumps(
            {"candidates": [{"name": "json-ok", "dockerfile": "FROM gpudock/base:bookworm"}]}
        )
    )
    proxy.answers.clear()
    result = gpudock("images", "validate", "--matrix", str(matrix), "--json", url=proxy.url)
    assert result.exit_code == 0, result.output
    [answer] = proxy.answers
    events = [json.loads(line) for line in answer.body.splitlines() if line.strip()]
    assert result.stdout == _indented(events[-1]["report"])
    assert [c["name"] for c in events[-1]["report"]["candidates"]] == ["json-ok"]
