"""`gpudock ssh INSTANCE [-- CMD]` and `gpudock ssh-config`: the system ssh, set up.

The gateway's host key comes from the API (over the token-authenticated
connection) into `~/.config/gpudock/known_hosts`, and ssh is told to trust that
file only: no trust-on-first-use prompt, and a changed key is an error.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Annotated

import typer

from gpudock.api.schemas import InstancePublic, SshEndpointPublic, UserPublic
from gpudock.cli import output
from gpudock.cli.client import CliError, connect, quoted_path
from gpudock.cli.config import config_path

CONTROL_PERSIST = "10m"
ALIVE_INTERVAL_S = 30
ALIVE_COUNT_MAX = 3


def known_hosts_path() -> Path:
    return config_path().parent / "known_hosts"


def control_dir() -> Path:
    """Where ControlMaster sockets live: an absolute path (ssh's `~` is the passwd
    home, which need not be $HOME) that this command creates, private."""
    return config_path().parent / "cm"


def host_pattern(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def pin_host_key(endpoint: SshEndpointPublic) -> Path:
    """Write the gateway's host key to gpudock's known_hosts (other lines kept)."""
    path = known_hosts_path()
    pattern = host_pattern(endpoint.host, endpoint.port)
    lines = path.read_text().splitlines() if path.exists() else []
    kept = [line for line in lines if line.split(" ", 1)[0] != pattern]
    kept.append(f"{pattern} {endpoint.host_key}")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text("\n".join(kept) + "\n")
    return path


def ssh_argv(
    endpoint: SshEndpointPublic,
    instance_id: str,
    known_hosts: Path,
    identity: Path | None,
    command: list[str],
) -> list[str]:
    argv = [
        "ssh",
        "-p",
        str(endpoint.port),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ServerAliveInterval={ALIVE_INTERVAL_S}",
    ]
    if identity is not None:
        argv += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
    return [*argv, f"{instance_id}@{endpoint.host}", *command]


def ssh(
    ref: Annotated[str, typer.Argument(metavar="INSTANCE", help="Instance id or name.")],
    command: Annotated[
        list[str] | None, typer.Argument(metavar="[-- CMD...]", help="Run CMD instead of a shell.")
    ] = None,
    identity: Annotated[
        Path | None, typer.Option("--identity", "-i", help="The private key to use.")
    ] = None,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the ssh command instead of running it.")
    ] = False,
) -> None:
    """Open a shell (or run CMD) in an instance through the SSH gateway."""
    with connect() as client:
        instance = client.get(quoted_path("instances", ref), InstancePublic)
        endpoint = client.get("/ssh", SshEndpointPublic)
    argv = ssh_argv(endpoint, instance.id, pin_host_key(endpoint), identity, command or [])
    if print_only:
        typer.echo(shlex.join(argv))
        return
    if shutil.which("ssh") is None:
        raise CliError("no `ssh` on PATH", hint="install the OpenSSH client (openssh-client)")
    os.execvp("ssh", argv)  # noqa: S606 (ssh, with arguments we built)


def ssh_config(
    identity: Annotated[
        Path | None, typer.Option("--identity", "-i", help="IdentityFile for these hosts.")
    ] = None,
    prefix: Annotated[str, typer.Option(help="Prefix for the Host aliases, e.g. 'gd-'.")] = "",
) -> None:
    """Print ~/.ssh/config entries for your instances (append them: >> ~/.ssh/config)."""
    with connect() as client:
        me = client.get("/users/me", UserPublic)
        instances = client.get("/instances", list[InstancePublic])
        endpoint = client.get("/ssh", SshEndpointPublic)
    known_hosts = pin_host_key(endpoint)
    control_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
    mine = [i for i in instances if i.user_id == me.id and i.status != "deleted"]
    typer.echo(f"# gpudock instances of {me.name} (written by `gpudock ssh-config`)")
    for instance in mine:
        typer.echo(host_entry(instance, endpoint, known_hosts, identity, prefix))
    if not mine:
        output.print_note("You have no instances yet; this printed no Host entries.")


def host_entry(
    instance: InstancePublic,
    endpoint: SshEndpointPublic,
    known_hosts: Path,
    identity: Path | None,
    prefix: str,
) -> str:
    aliases = " ".join(dict.fromkeys(prefix + n for n in (instance.name, instance.id)))
    options: list[tuple[str, object]] = [
        ("HostName", endpoint.host),
        ("Port", endpoint.port),
        ("User", instance.id),
        ("UserKnownHostsFile", known_hosts),
        ("StrictHostKeyChecking", "yes"),
        ("ControlMaster", "auto"),
        ("ControlPath", control_dir() / "%C"),
        ("ControlPersist", CONTROL_PERSIST),
        ("ServerAliveInterval", ALIVE_INTERVAL_S),
        ("ServerAliveCountMax", ALIVE_COUNT_MAX),
    ]
    if identity is not None:
        options += [("IdentityFile", identity.expanduser()), ("IdentitiesOnly", "yes")]
    body = "\n".join(f"    {key} {_quoted(value)}" for key, value in options)
    return f"\nHost {aliases}\n{body}"


def _quoted(value: object) -> str:
    text = str(value)
    return f'"{text}"' if " " in text else text
