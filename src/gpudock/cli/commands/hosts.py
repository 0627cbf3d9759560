"""`gpudock hosts`: where the GPUs are (bare); hosts with agents
(add|list|label|drain|remove), and what the fence kept on them (kept)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.host_schemas import (
    AgentHostInvitationPublic,
    AgentHostPublic,
    KeptContainerPublic,
)
from gpudock.cli import output
from gpudock.cli.client import connect, quoted_path
from gpudock.cli.commands import gpus
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag, parse_pairs

app = typer.Typer(
    help="Hosts and their GPUs, with the instance holding each GPU; add|list|label|drain|"
    "remove|kept hosts with agents (admin).",
    invoke_without_command=True,
)
COLUMNS = ("NAME", "STATE", "LINK", "LAST HEARTBEAT", "AGENT", "ENGINE", "GPUS", "LABELS")
LINK_STYLES = {"up": "green", "down": "red", "none": "dim"}
HostName = Annotated[str, typer.Argument(help="The host's name, as `gpudock hosts add` took it.")]
LabelOpt = Annotated[
    list[str] | None,
    typer.Option("--label", "-l", metavar="K=V", help="A label, e.g. region=eu (repeatable)."),
]


@app.callback()
def inventory(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Hosts and their GPUs, with the instance holding each GPU; add|list|label|drain|
    remove|kept hosts with agents (admin)."""
    if ctx.invoked_subcommand is None:
        gpus.list_hosts(json_output)


@app.command("add")
def add(name: HostName, label: LabelOpt = None, json_output: JsonFlag = False) -> None:
    """Add a host (with its labels) and print the one-time command that enrolls its agent."""
    body: dict[str, object] = {"name": name}
    if label:
        body["labels"] = parse_pairs(label, "--label")
    with connect() as client:
        invitation = client.post("/agent-hosts", AgentHostInvitationPublic, body)
    if json_output:
        output.print_json(invitation)
        return
    until = output.when(invitation.expires_at)
    output.print_message(f"Added host {name}. On it, as root, run (once, before {until}):")
    typer.echo(invitation.join_command)  # plain, so that it copies cleanly
    output.print_note("The token is good once and is not shown again.")


@app.command("list")
def list_agent_hosts(json_output: JsonFlag = False) -> None:
    """Hosts with agents: state, link, last heartbeat, agent and engine versions, GPUs."""
    show_collection(
        "/agent-hosts",
        list[AgentHostPublic],
        COLUMNS,
        _row,
        json_output=json_output,
        empty="No hosts added (`gpudock hosts add NAME`).",
    )


@app.command("label")
def label(
    name: HostName,
    labels: Annotated[
        list[str],
        typer.Argument(
            metavar="K=V|K-...", help="Set K to V, or take K off with 'K-' (as kubectl does)."
        ),
    ],
    json_output: JsonFlag = False,
) -> None:
    """Set or remove the host's labels; instances placed from now on see them."""
    remove = [word[:-1] for word in labels if word.endswith("-") and "=" not in word]
    pairs = [word for word in labels if not (word.endswith("-") and "=" not in word)]
    body = {"set": parse_pairs(pairs, "K=V"), "remove": remove}
    with connect() as client:
        host = client.post(f"/agent-hosts/{name}/labels", AgentHostPublic, body)
    output.print_answer(host, json_output, f"Host {host.name}: {_labels(host) or 'no labels'}.")


@app.command("drain")
def drain(
    name: HostName,
    undo: Annotated[bool, typer.Option("--undo", help="Take new instances again.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Keep the host's instances, place no new ones on it (--undo: place again)."""
    action = "undrain" if undo else "drain"
    with connect() as client:
        host = client.post(f"/agent-hosts/{name}/{action}", AgentHostPublic)
    output.print_answer(host, json_output, f"Host {host.name} is {host.state}.")


@app.command("remove")
def remove(name: HostName, json_output: JsonFlag = False) -> None:
    """Forget the host and revoke its agent (its link closes, its key is refused)."""
    with connect() as client:
        host = client.delete(f"/agent-hosts/{name}", AgentHostPublic)
    output.print_answer(host, json_output, f"Removed host {host.name}; its agent is revoked.")


KEPT_COLUMNS = ("INSTANCE", "NAME", "OWNER", "CONTAINER", "DATA VOLUMES", "WHY KEPT")


@app.command("kept")
def kept(
    name: HostName,
    remove_instance: Annotated[
        str | None,
        typer.Option(
            "--remove", metavar="INSTANCE", help="Remove the container kept for this instance."
        ),
    ] = None,
    with_data: Annotated[
        bool, typer.Option("--with-data", help="With --remove: its old data volume too.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Containers the fence stopped and kept on the host (their instances moved away or
    were deleted while it was out of reach); --remove one once nothing in it is needed."""
    if remove_instance is None:
        show_collection(
            quoted_path("agent-hosts", name, "kept"),
            list[KeptContainerPublic],
            KEPT_COLUMNS,
            _kept_row,
            json_output=json_output,
            empty=f"Host {name} keeps no container of another host's instance.",
        )
        return
    path = quoted_path("agent-hosts", name, "kept", remove_instance)
    with connect() as client:
        params = {"with_data": "true" if with_data else "false"}
        removed = client.delete(path, KeptContainerPublic, params=params)
    parts = [removed.container] if removed.container else []
    parts += removed.volumes if with_data else []
    output.print_answer(removed, json_output, f"Removed {', '.join(parts)} from {name}.")


def _kept_row(kept: KeptContainerPublic) -> list[str | Text]:
    return [
        kept.instance_id,
        kept.instance_name or "-",
        kept.owner or "-",
        kept.container or "-",
        ", ".join(kept.volumes) or "-",
        kept.reason,
    ]


def _row(host: AgentHostPublic) -> list[str | Text]:
    models = Counter(gpu.model for gpu in host.gpus)
    listed = ", ".join(f"{count} × {model}" for model, count in sorted(models.items()))
    return [
        host.name,
        Text(f"{host.state}, lost", style="red") if host.lost_at else host.state,
        Text(host.link_state, style=LINK_STYLES.get(host.link_state, "")),
        output.when(host.last_heartbeat_at),
        output.text(host.agent_version),
        output.text(host.engine_version),
        listed or "-",
        _labels(host) or "-",
    ]


def _labels(host: AgentHostPublic) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(host.labels.items()))
