"""`gpudock hosts add|label|list` with labels, and `instances create --host-label`,
against a real server (one that takes agents) through the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpudock.cli.main import app
from gpudock.platform import open_platform
from gpudock.settings import Settings
from tests.support.cli import FLEET, LiveServer, serving


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("gpudock-data"),
        simulate=FLEET,
        runtime="fake",
        image_pull="never",
        agent_link_port=7443,
        agent_link_host="127.0.0.1",
    )
    with serving(open_platform(settings)) as server:
        yield server


def gpudock(server: LiveServer, config: Path, *args: str) -> Result:
    env = {
        "GPUDOCK_URL": server.url,
        "GPUDOCK_TOKEN": server.admin_token,
        "XDG_CONFIG_HOME": str(config),
        "COLUMNS": "200",
    }
    return CliRunner().invoke(app, list(args), env=env)


def test_labels_are_added_changed_listed_and_asked_for(
    live_server: LiveServer, tmp_path: Path
) -> None:
    added = gpudock(live_server, tmp_path, "hosts", "add", "box-1", "--label", "region=eu")
    assert added.exit_code == 0, added.output
    assert "gpudock agent join ssh://127.0.0.1:7443 " in added.stdout
    labelled = gpudock(
        live_server, tmp_path, "hosts", "label", "box-1", "zone=eu-west-1", "region-", "--json"
    )
    assert labelled.exit_code == 0, labelled.output
    assert json.loads(labelled.stdout)["labels"] == {"zone": "eu-west-1"}
    listed = gpudock(live_server, tmp_path, "hosts", "list")
    assert "LABELS" in listed.stdout and "zone=eu-west-1" in listed.stdout
    bad = gpudock(live_server, tmp_path, "hosts", "label", "box-1", "Zone=x")
    assert bad.exit_code != 0 and "bad label key 'Zone'" in bad.output
    nobody = gpudock(
        live_server, tmp_path, "instances", "create", "--gpu", "A100-80GB", "--host-label", "zone=b"
    )
    assert nobody.exit_code != 0 and "no host carries the labels zone=b" in nobody.output
    # box-1 carries the label but has no agent yet, so no GPUs: refused, saying so.
    empty = gpudock(
        live_server,
        tmp_path,
        *("instances", "create", "--gpu", "A100-80GB", "--host-label", "zone=eu-west-1"),
    )
    assert empty.exit_code != 0
    assert "no host labelled zone=eu-west-1 has 1 × A100-80GB: the most one has is 0" in (
        " ".join(empty.output.split())
    )


def test_kept_says_which_host_is_unknown_and_which_one_must_be_linked_first(
    live_server: LiveServer, tmp_path: Path
) -> None:
    unknown = gpudock(live_server, tmp_path, "hosts", "kept", "nowhere")
    assert unknown.exit_code != 0 and "no agent host 'nowhere'" in unknown.output
    added = gpudock(live_server, tmp_path, "hosts", "add", "box-k")
    assert added.exit_code == 0, added.output
    for command in (("hosts", "kept", "box-k"), ("hosts", "kept", "box-k", "--remove", "i-1")):
        unlinked = gpudock(live_server, tmp_path, *command)
        assert unlinked.exit_code != 0
        assert "host box-k's agent is not connected to this server" in (
            " ".join(unlinked.output.split())
        )
