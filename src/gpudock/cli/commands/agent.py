"""`gpudock agent join|run`: the agent on each GPU host (as root; deploy/ has its unit)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from gpudock.cli.client import EXIT_ERROR, EXIT_USAGE, CliError
from gpudock.errors import GpudockError

app = typer.Typer(
    help="Run on each GPU host: enroll with a server (join), keep its link (run).",
    no_args_is_help=True,
)

StateDir = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        envvar="GPUDOCK_AGENT_STATE_DIR",
        help="Where the agent keeps its key and its enrollment.",
    ),
]
DockerHost = Annotated[
    str,
    typer.Option(
        "--docker-host",
        envvar="GPUDOCK_AGENT_DOCKER_HOST",
        help="The host's Docker Engine socket (unix:// only).",
    ),
]
LeaseS = Annotated[
    float | None,
    typer.Option(
        "--lease-s",
        envvar="GPUDOCK_AGENT_LEASE_S",
        min=1,
        metavar="S",
        help="Cut off from the server this long, stop the tenants' containers (kept, not "
        "removed); default: the lease the server gives.",
    ),
]
DEFAULT_STATE_DIR = Path("/var/lib/gpudock-agent")
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


@app.command("join")
def join(
    url: Annotated[str, typer.Argument(help="The server's link, ssh://HOST:PORT.")],
    token: Annotated[str, typer.Argument(help="The one-time token from `gpudock hosts add`.")],
    state_dir: StateDir = DEFAULT_STATE_DIR,
    docker_host: DockerHost = DEFAULT_DOCKER_HOST,
    lease_s: LeaseS = None,
) -> None:
    """Enroll this host with the server (once), then keep its link as `run` does."""
    from gpudock.agent import process

    _guarded(lambda: process.join(state_dir, url, token, docker_host, lease_s))


@app.command("run")
def run(
    state_dir: StateDir = DEFAULT_STATE_DIR,
    docker_host: DockerHost = DEFAULT_DOCKER_HOST,
    lease_s: LeaseS = None,
) -> None:
    """Keep the link to the server this host enrolled with (the systemd unit runs this)."""
    from gpudock.agent import process

    _guarded(lambda: process.run(state_dir, docker_host, lease_s))


def _guarded(action: Callable[[], None]) -> None:
    from gpudock.agent.link import AgentStopped

    try:
        action()
    except AgentStopped as exc:
        raise CliError(exc.message, exit_code=EXIT_ERROR) from exc
    except GpudockError as exc:
        raise CliError(exc.message, exit_code=EXIT_USAGE) from exc
