"""The command `gpudock ssh` runs: the host key pinned from the API, no trust on first use."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from gpudock.api.schemas import SshEndpointPublic
from gpudock.cli.commands import ssh as ssh_command
from gpudock.services.ssh import endpoint as ssh_endpoint
from tests.support.sshgw import World, make_key

pytestmark = pytest.mark.docker


def test_the_cli_command_connects_with_the_pinned_host_key(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    served = ssh_endpoint.endpoint(world.platform.ctx.settings)
    endpoint = SshEndpointPublic.model_validate(dataclasses.asdict(served))
    assert endpoint.port == world.port  # the gateway published the port it got
    known_hosts = ssh_command.pin_host_key(endpoint)
    argv = ssh_command.ssh_argv(
        endpoint, world.instance.id, known_hosts, world.keys["alice"], ["hostname"]
    )
    assert "StrictHostKeyChecking=yes" in argv
    run = [*argv[:-2], "-o", "BatchMode=yes", *argv[-2:]]
    result = subprocess.run(run, capture_output=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"train\n"

    impostor = make_key(tmp_path, "impostor")
    forged = endpoint.model_copy(
        update={"host_key": " ".join(impostor.with_suffix(".pub").read_text().split()[:2])}
    )
    ssh_command.pin_host_key(forged)
    refused = subprocess.run(run, capture_output=True, timeout=30, check=False)
    assert refused.returncode == 255
    assert b"Host key verification failed" in refused.stderr
