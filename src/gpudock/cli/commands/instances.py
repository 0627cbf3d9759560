"""`gpudock instances ...`: create, list, show, start, stop, restart, delete, auto-stop."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from gpudock.api.image_schemas import SavedImagePublic
from gpudock.api.schemas import InstanceEventPublic, InstancePublic
from gpudock.cli import output
from gpudock.cli.client import ApiClient, Query, connect, quoted_path
from gpudock.cli.commands import auto_stop, instance_metrics
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag, parse_pairs
from gpudock.cli.commands.waiting import DEFAULT_TIMEOUT_S, Waiter

app = typer.Typer(help="GPU instances (containers with GPUs).", no_args_is_help=True)

SHOWN_EVENTS = 10
DONE = {"start": "Started", "stop": "Stopped", "restart": "Restarted", "delete": "Deleted"}
REQUESTED = {"start": "Starting", "stop": "Stopping", "restart": "Restarting", "delete": "Deleting"}
COLUMNS = ("ID", "NAME", "STATUS", "GPUS", "HOST", "IMAGE", "CREATED")
NONE_YET = "No instances; `gpudock instances create --gpu MODEL` makes one."
WaitFlag = Annotated[bool, typer.Option("--wait", help="Wait until it is done.")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=0, metavar="S", help="How long --wait waits, seconds.")
]
RefArg = Annotated[str, typer.Argument(metavar="ID", help="Instance id or name.")]


def parse_models(gpu: str | None) -> list[str]:
    """`--gpu A100-80GB,H100-80GB`: the models the instance accepts, preferred first."""
    models = [m.strip() for m in (gpu or "").split(",") if m.strip()]
    if len(set(models)) != len(models):
        raise typer.BadParameter("a model is named twice", param_hint="'--gpu'")
    return models


@app.command("create")
def create(
    gpu: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL[,MODEL…]",
            help="GPU model, e.g. A100-80GB; several (A100-80GB,H100-80GB): any of them, "
            "the first preferred.",
        ),
    ] = None,
    count: Annotated[int, typer.Option(min=0, help="GPUs; 0 = no-GPU mode.")] = 1,
    share: Annotated[
        float | None,
        typer.Option(metavar="FRACTION", help="A share of one GPU instead, e.g. 0.25."),
    ] = None,
    share_memory: Annotated[
        int | None,
        typer.Option(metavar="GB", help="A share of one GPU as GB of its memory, e.g. 20."),
    ] = None,
    image: Annotated[str | None, typer.Option(metavar="REF", help="Container image.")] = None,
    name: Annotated[str | None, typer.Option(help="Name; default: the id.")] = None,
    cpu: Annotated[float | None, typer.Option(help="CPUs; default: a share per GPU.")] = None,
    memory: Annotated[int | None, typer.Option(metavar="GB", help="Memory in GB.")] = None,
    disk: Annotated[int | None, typer.Option(metavar="GB", help="Disk in GB.")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", metavar="K=V", help="Repeatable.")
    ] = None,
    idle_stop: auto_stop.IdleStopOpt = None,
    idle_below: auto_stop.IdleBelowOpt = None,
    stop_at: auto_stop.StopAtOpt = None,
    stop_after: auto_stop.StopAfterOpt = None,
    stop_on_exit: auto_stop.StopOnExitOpt = None,
    command: Annotated[
        str | None,
        typer.Option(
            metavar="'SHELL LINE'",
            help="Run this as a job (the container's main process, /bin/sh -c); the "
            "instance stops when it exits, its data kept.",
        ),
    ] = None,
    host_label: Annotated[
        list[str] | None,
        typer.Option(
            "--host-label",
            metavar="K=V",
            help="A label its host must carry (repeatable; `gpudock hosts list` shows them).",
        ),
    ] = None,
    on_host_loss: Annotated[
        str,
        typer.Option(
            metavar="wait|elsewhere",
            help="If its host is lost: wait for it (data kept, not billed meanwhile) or "
            "restart elsewhere at once with an empty data volume.",
        ),
    ] = "wait",
    wait: WaitFlag = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonFlag = False,
) -> None:
    """Create an instance (whole GPUs, or a share of one with --share or
    --share-memory); the server places it and starts it."""
    models = parse_models(gpu)
    if count > 0 and not models:
        raise typer.BadParameter("required unless --count 0 (no-GPU mode)", param_hint="'--gpu'")
    body: dict[str, object] = {
        "gpu_model": models[0] if models else None,
        "gpu_count": count,
        "env": parse_pairs(env or [], "--env"),
    }
    optional: dict[str, object] = {"name": name, "image": image, "cpu": cpu}
    optional |= {"memory_gb": memory, "disk_gb": disk}
    optional |= {"gpu_share": share, "gpu_memory_gb": share_memory}
    optional["gpu_models"] = models if len(models) > 1 else None
    policy = auto_stop.policy_body(idle_stop, idle_below, stop_at, stop_after, stop_on_exit)
    optional["auto_stop"] = policy or None
    optional["command"] = command
    optional["host_labels"] = parse_pairs(host_label, "--host-label") if host_label else None
    optional["on_host_loss"] = on_host_loss if on_host_loss != "wait" else None
    body.update({k: v for k, v in optional.items() if v is not None})
    with connect() as client:
        instance = client.post("/instances", InstancePublic, body)
        if wait:
            instance = Waiter(client, timeout, quiet=json_output).wait(instance, "running")
    if json_output:
        output.print_json(instance)
        return
    _report("Created", instance)
    if not wait:
        output.print_message(f"`gpudock instances show {instance.name}` follows it.", "dim")


def gpus_of(i: InstancePublic) -> str:
    """'2 × A100-80GB', '0.25 × A100-80GB' (a share of one), 'no GPU'."""
    if i.gpu_share is not None:
        return f"{i.gpu_share} × {i.gpu_model}"
    return output.gpus(i.gpu_model, i.gpu_count)


@app.command("list")
def list_instances(json_output: JsonFlag = False) -> None:
    """List instances (an admin sees everyone's)."""
    show_collection(
        "/instances", list[InstancePublic], COLUMNS, _row, json_output=json_output, empty=NONE_YET
    )


def _row(i: InstancePublic) -> list[str | Text]:
    return [
        i.id,
        i.name,
        output.status_text(i.status),
        gpus_of(i),
        output.text(i.host),
        i.image,
        output.when(i.created_at),
    ]


@app.command("show")
def show(ref: RefArg, json_output: JsonFlag = False) -> None:
    """An instance's settings, GPUs, host, status and latest events."""
    with connect() as client:
        instance = client.get(quoted_path("instances", ref), InstancePublic)
        if json_output:
            output.print_json(instance)
            return
        events = client.get(
            quoted_path("instances", instance.id, "events"), list[InstanceEventPublic]
        )
    output.show(_details(instance))
    if events:
        output.show(_events(events[-SHOWN_EVENTS:], len(events)))


def _details(i: InstancePublic) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    status = output.status_text(i.status).append(f"  {i.status_reason}", style="")
    rows: list[tuple[str, str | Text]] = [
        ("ID", i.id),
        ("Name", i.name),
        ("Status", status),
        ("Desired", i.desired_state),
        ("GPUs", "\n".join([gpus_of(i), *i.gpus])),
        *_share_rows(i),
        ("Host", output.text(i.host)),
        ("Image", i.image),
        ("Size", f"{i.cpu:g} CPUs · {i.memory_gb} GB memory · {i.disk_gb} GB disk"),
        ("Container", output.text(i.container_id)),
        ("SSH", output.text(i.ssh_command)),
        ("Auto-stop", auto_stop.summary_of(i)),
        *([("Command", Text(i.command))] if i.command else []),
        ("Owner", i.user_id),
        ("Created", output.when(i.created_at)),
        ("Updated", output.when(i.updated_at)),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def _share_rows(i: InstancePublic) -> list[tuple[str, str | Text]]:
    """What a share is held to, the models it accepts, where it waits."""
    rows: list[tuple[str, str | Text]] = []
    if i.gpu_share is not None:
        limit = (
            f"{i.gpu_memory_limit_mb} MiB of GPU memory"
            if i.gpu_memory_limit_mb is not None
            else "its GPU memory limit is set when it is placed"
        )
        rows.append(("Share", f"{i.gpu_share} of one GPU · {limit}"))
    if len(i.gpu_models) > 1:
        rows.append(("Accepts", ", ".join(i.gpu_models)))
    if i.queue is not None:
        q = i.queue
        where = f"{q.position} of {q.waiting} waiting for these GPUs — {q.reason}"
        rows.append(("Queue", f"{where}\nestimate: {q.estimate}"))
    return rows


def _events(events: list[InstanceEventPublic], total: int) -> Table:
    title = f"Last {len(events)} of {total} events" if total > len(events) else "Events"
    grid = output.table("TIME", "CHANGE", "MESSAGE", title=title)
    for event in events:
        before = event.from_status
        change = Text(f"{before} → " if before else "")
        change.append_text(output.status_text(event.to_status))
        grid.add_row(output.when(event.at), change, event.message)
    return grid


def _act(
    ref: str,
    verb: str,
    target: str,
    *,
    wait: bool,
    timeout: float,
    json: bool,
    params: Query = None,
) -> None:
    """POST (or DELETE) the action, optionally wait for `target`, report."""
    with connect() as client:
        instance = _request(client, ref, verb, params)
        if wait:
            instance = Waiter(client, timeout, quiet=json).wait(instance, target)
    if json:
        output.print_json(instance)
        return
    _report((DONE if wait else REQUESTED)[verb], instance)


def _request(client: ApiClient, ref: str, verb: str, params: Query) -> InstancePublic:
    if verb == "delete":
        return client.delete(quoted_path("instances", ref), InstancePublic)
    return client.post(quoted_path("instances", ref, verb), InstancePublic, params=params)


def _report(what: str, i: InstancePublic) -> None:
    line = Text(f"{what} {i.name} ({i.id}, {gpus_of(i)}): ")
    line.append_text(output.status_text(i.status))
    if i.status_reason:
        line.append(f" — {i.status_reason}")
    output.stdout().print(line)


@app.command("start")
def start(
    ref: RefArg,
    wait: WaitFlag = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    stay: Annotated[
        bool,
        typer.Option(
            "--stay", help="Wait for a GPU on its own host instead of moving it (with its data)."
        ),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Start a stopped (or failed) instance: on its old GPUs if free, else on any
    host with room, its data moved along (same id, same SSH endpoint)."""
    params = {"stay": "true"} if stay else None
    _act(ref, "start", "running", wait=wait, timeout=timeout, json=json_output, params=params)


def plain_action(verb: str, target: str, summary: str) -> None:
    """Register `gpudock instances VERB ID [--wait] [--json]`: an action with no
    options of its own that, with --wait, is done when the instance is `target`."""

    @app.command(verb, help=summary)
    def command(
        ref: RefArg,
        wait: WaitFlag = False,
        timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
        json_output: JsonFlag = False,
    ) -> None:
        _act(ref, verb, target, wait=wait, timeout=timeout, json=json_output)


plain_action("stop", "stopped", "Stop an instance: its GPUs are released, its data is kept.")
plain_action("restart", "running", "Restart a running instance's container on the same GPUs.")
app.command("auto-stop")(auto_stop.change)


@app.command("delete")
def delete(
    ref: RefArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    wait: WaitFlag = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    json_output: JsonFlag = False,
) -> None:
    """Delete an instance with its container and data volume."""
    if not yes:
        with connect() as client:
            instance = client.get(quoted_path("instances", ref), InstancePublic)
        typer.confirm(
            f"Delete {instance.name} ({instance.id}) and its data volume?",
            abort=True,
            err=True,
        )
        ref = instance.id
    _act(ref, "delete", "deleted", wait=wait, timeout=timeout, json=json_output)


@app.command("save-image")
def save_image(
    ref: RefArg,
    name: Annotated[str, typer.Option("--name", metavar="N", help="Image name[:tag].")],
    json_output: JsonFlag = False,
) -> None:
    """Save the instance's system disk as a private image (not the data volume)."""
    with connect() as client:
        saved = client.post(
            quoted_path("instances", ref, "save-image"), SavedImagePublic, {"name": name}
        )
    output.print_answer(
        saved,
        json_output,
        f"saved {saved.image.reference} (id {saved.image.id})",
        style="green",
        note=saved.note,
    )


# The monitoring commands live beside, in their own module.
app.command("top")(instance_metrics.top)
app.command("metrics")(instance_metrics.metrics)
# Service URLs live in their own module; `gpudock instances` lists them.
from gpudock.cli.commands import services as _service_commands  # noqa: E402

app.command("services")(_service_commands.services)
app.command("expose")(_service_commands.expose)
app.command("unexpose")(_service_commands.unexpose)
app.command("revoke-links")(_service_commands.revoke_links)
