"""`gpudock notifications ...` (the list, email, the delivery log, GPU watches)
and `gpudock webhooks ...` (add — the secret is printed once —, list, remove,
deliveries)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.notification_schemas import (
    DeliveryPublic,
    EmailPublic,
    GpuWatchPublic,
    NotificationPublic,
    WebhookPublic,
    WebhookWithSecretPublic,
)
from gpudock.cli import output
from gpudock.cli.client import connect, quoted_path
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag

app = typer.Typer(
    help="What gpudock tells you: the list, email, deliveries, GPU watches.", no_args_is_help=True
)
webhooks_app = typer.Typer(
    help="Webhooks: signed JSON for each notification.", no_args_is_help=True
)
KindsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kind",
        metavar="KIND",
        help="Only this kind (repeatable; `gpudock notifications kinds`); default: all.",
    ),
]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=500, help="At most this many.")]
STATE_STYLES = {"delivered": "green", "pending": "yellow", "failed": "red"}
DELIVERY_COLUMNS = ("ID", "KIND", "TO", "STATE", "TRIES", "LAST RESULT", "CREATED")


@app.command("list")
def list_notifications(limit: LimitOpt = 50, json_output: JsonFlag = False) -> None:
    """Your notifications, newest first."""
    show_collection(
        "/notifications",
        list[NotificationPublic],
        ("TIME", "KIND", "MESSAGE"),
        lambda n: [output.when(n.created_at), n.kind, n.message],
        json_output=json_output,
        params={"limit": str(limit)},
        empty="No notifications yet.",
    )


@app.command("kinds")
def list_kinds(json_output: JsonFlag = False) -> None:
    """Every kind of notification and what causes it."""
    with connect() as client:
        kinds = client.get("/notifications/kinds", dict[str, str])
    if json_output:
        output.print_json(kinds)
        return
    grid = output.table("KIND", "WHEN")
    for kind, meaning in kinds.items():
        grid.add_row(kind, meaning)
    output.show(grid)


@app.command("deliveries")
def deliveries(limit: LimitOpt = 50, json_output: JsonFlag = False) -> None:
    """The delivery log of your webhooks and email, newest first."""
    _deliveries("/notifications/deliveries", limit, json_output)


def _deliveries(path: str, limit: int, json_output: bool) -> None:
    show_collection(
        path,
        list[DeliveryPublic],
        DELIVERY_COLUMNS,
        _delivery_row,
        json_output=json_output,
        params={"limit": str(limit)},
        empty="Nothing sent yet.",
    )


def _delivery_row(d: DeliveryPublic) -> list[str | Text]:
    return [
        d.id,
        d.kind,
        d.target,
        Text(d.state, style=STATE_STYLES.get(d.state, "")),
        str(d.attempts),
        d.last_result,
        output.when(d.created_at),
    ]


@app.command("email")
def email(
    address: Annotated[
        str | None, typer.Argument(help="Where to send them; omit to show the current one.")
    ] = None,
    kinds: KindsOpt = None,
    clear: Annotated[bool, typer.Option("--clear", help="Stop sending email.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Send your notifications by email too (through the operator's SMTP server)."""
    with connect() as client:
        if clear:
            removed = client.delete("/notifications/email", EmailPublic)
            output.print_answer(removed, json_output, f"No more email to {removed.address}")
            return
        if address is None:
            shown = client.get("/notifications/email", EmailPublic)
            said = f"Email goes to {shown.address} ({', '.join(shown.kinds) or 'every kind'})"
            output.print_answer(shown, json_output, said)
            return
        body = {"address": address, "kinds": kinds or []}
        made = client.put("/notifications/email", EmailPublic, body)
    output.print_answer(made, json_output, f"Notifications go to {made.address} too")


@app.command("watch")
def watch(
    gpu_model: Annotated[str, typer.Argument(metavar="MODEL", help="e.g. A100-80GB")],
    count: Annotated[int, typer.Option(min=1, max=64, help="How many must be free.")] = 1,
    json_output: JsonFlag = False,
) -> None:
    """Be told once when COUNT GPUs of MODEL are free."""
    with connect() as client:
        made = client.post("/gpu-watches", GpuWatchPublic, {"gpu_model": gpu_model, "count": count})
    output.print_answer(
        made, json_output, f"Watching for {made.count} × {made.gpu_model} [{made.id}]"
    )


@app.command("watches")
def watches(json_output: JsonFlag = False) -> None:
    """Your GPU watches, waiting and fired."""
    show_collection(
        "/gpu-watches",
        list[GpuWatchPublic],
        ("ID", "GPUS", "CREATED", "FIRED"),
        lambda w: [
            w.id,
            f"{w.count} × {w.gpu_model}",
            output.when(w.created_at),
            output.when(w.fired_at) if w.fired_at else "waiting",
        ],
        json_output=json_output,
        empty="No GPU watches; `gpudock notifications watch MODEL` adds one.",
    )


@app.command("unwatch")
def unwatch(
    watch_id: Annotated[str, typer.Argument(metavar="ID")], json_output: JsonFlag = False
) -> None:
    """Remove a GPU watch."""
    with connect() as client:
        removed = client.delete(quoted_path("gpu-watches", watch_id), GpuWatchPublic)
    output.print_answer(removed, json_output, f"Removed watch {removed.id}")


@webhooks_app.command("add")
def add_webhook(
    url: Annotated[str, typer.Argument(help="http:// or https:// URL that takes a POST")],
    kinds: KindsOpt = None,
    json_output: JsonFlag = False,
) -> None:
    """Add a webhook and print its signing secret (shown this one time only)."""
    with connect() as client:
        made = client.post("/webhooks", WebhookWithSecretPublic, {"url": url, "kinds": kinds or []})
    if json_output:
        output.print_json(made)
        return
    output.print_message(f"Added webhook {made.id} → {made.url}; its signing secret:")
    typer.echo(made.secret)  # plain, so that it copies and pipes cleanly
    output.print_note(
        "The secret is not shown again. Check X-Gpudock-Signature with it "
        "(docs/notifications.md); de-duplicate on X-Gpudock-Delivery."
    )


@webhooks_app.command("list")
def list_webhooks(json_output: JsonFlag = False) -> None:
    """Your webhooks."""
    show_collection(
        "/webhooks",
        list[WebhookPublic],
        ("ID", "URL", "KINDS", "CREATED"),
        lambda w: [w.id, w.url, ", ".join(w.kinds) or "all", output.when(w.created_at)],
        json_output=json_output,
        empty="No webhooks; `gpudock webhooks add URL` adds one.",
    )


@webhooks_app.command("remove")
def remove_webhook(
    webhook_id: Annotated[str, typer.Argument(metavar="ID")], json_output: JsonFlag = False
) -> None:
    """Remove a webhook; what is still pending to it is not sent."""
    with connect() as client:
        removed = client.delete(quoted_path("webhooks", webhook_id), WebhookPublic)
    output.print_answer(removed, json_output, f"Removed webhook {removed.id} ({removed.url})")


@webhooks_app.command("deliveries")
def webhook_deliveries(
    webhook_id: Annotated[str, typer.Argument(metavar="ID")],
    limit: LimitOpt = 50,
    json_output: JsonFlag = False,
) -> None:
    """One webhook's delivery log: each notification, its tries and the last answer."""
    _deliveries(quoted_path("webhooks", webhook_id, "deliveries"), limit, json_output)
