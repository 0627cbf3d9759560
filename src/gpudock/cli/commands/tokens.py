"""`gpudock tokens create|list|revoke`: your own named API tokens."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.schemas import TokenPublic, TokenWithValuePublic
from gpudock.cli import output
from gpudock.cli.client import connect, quoted_path
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag

app = typer.Typer(
    help="Your API tokens: named, optionally expiring, revocable.", no_args_is_help=True
)

_DURATION = re.compile(r"\d+[A-Za-z]+")
STATE_STYLES = {"active": "green", "expired": "yellow", "revoked": "dim"}
COLUMNS = ("", "ID", "NAME", "STATE", "CREATED", "EXPIRES", "LAST USED")


def expiry_body(value: str | None) -> dict[str, str]:
    """`--expires` as the API takes it: a duration ('90d') or a time; a time
    without a zone is local time, as the CLI prints times."""
    if value is None:
        return {}
    if _DURATION.fullmatch(value):
        return {"expires_in": value}  # the server says which units it takes
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            "use a duration (30m, 12h, 90d, 2w) or a date and time "
            "(2026-12-31, 2026-12-31T18:00, 2026-12-31T18:00:00Z)",
            param_hint="'--expires'",
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return {"expires_at": moment.isoformat()}


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name you will know it by, e.g. laptop or ci.")],
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            metavar="WHEN",
            help="A duration (30m, 12h, 90d, 2w) or a date/time (local unless a zone is "
            "given); default: never.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Create a token for yourself and print it (shown this one time only)."""
    body = {"name": name, **expiry_body(expires)}
    with connect() as client:
        created = client.post("/tokens", TokenWithValuePublic, body)
    if json_output:
        output.print_json(created)
        return
    until = f"expires {output.when(created.expires_at)}" if created.expires_at else "never expires"
    output.print_message(f"Created token {created.name} [{created.id}], {until}:")
    typer.echo(created.token)  # plain, so that it copies and pipes cleanly
    output.print_note(
        "This token is not shown again; gpudock keeps only its digest. "
        f"Use it with: gpudock login {client.url} --token <token> (or GPUDOCK_TOKEN)"
    )


@app.command("list")
def list_tokens(
    all_tokens: Annotated[bool, typer.Option("--all", help="Also list revoked tokens.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """List your tokens; * marks the one this CLI uses."""
    params = {"include_revoked": "true"} if all_tokens else None
    show_collection(
        "/tokens", list[TokenPublic], COLUMNS, _row, json_output=json_output, params=params
    )


def _row(token: TokenPublic) -> list[str | Text]:
    return [
        "*" if token.current else "",
        token.id,
        token.name,
        Text(token.state, style=STATE_STYLES.get(token.state, "")),
        output.when(token.created_at),
        output.when(token.expires_at) if token.expires_at else "never",
        output.when(token.last_used_at),
    ]


@app.command("revoke")
def revoke(
    ref: Annotated[str, typer.Argument(metavar="TOKEN", help="Token id or name.")],
    json_output: JsonFlag = False,
) -> None:
    """Revoke one of your tokens; it stops working at once."""
    with connect() as client:
        revoked = client.delete(quoted_path("tokens", ref), TokenPublic)
    relogin = (
        "That was the token this CLI uses: log in with another one "
        f"(gpudock login {client.url} --token <token>)"
    )
    said = f"Revoked token {revoked.name} [{revoked.id}]"
    output.print_answer(revoked, json_output, said, note=relogin if revoked.current else None)
