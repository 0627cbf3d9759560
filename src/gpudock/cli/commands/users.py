"""`gpudock login`, `gpudock whoami` and `gpudock users ...`."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.schemas import (
    UserDeletionPublic,
    UserPublic,
    UserStateChangePublic,
    UserWithTokenPublic,
)
from gpudock.cli import output
from gpudock.cli.client import (
    EXIT_USAGE,
    ApiClient,
    CliError,
    connect,
    quoted_path,
    resolve_config,
)
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag
from gpudock.cli.config import TOKEN_ENV, URL_ENV, ConfigError, normalize_url, save_config

app = typer.Typer(
    help="Users: create, list, disable, enable, delete (admin).", no_args_is_help=True
)

NameArg = Annotated[str, typer.Argument(help="The user's name.")]
STATE_STYLES = {"active": "green", "disabled": "yellow", "deleted": "dim"}
COLUMNS = ("ID", "NAME", "ADMIN", "STATE", "CREATED")
DELETE_QUESTION = (
    "Delete user {name}{instances}? Deleted: {what}SSH keys, console password and "
    "sessions; API tokens revoked. Kept: ledger postings and balance, instance records "
    "and events, the SSH audit, private images; the name stays taken."
)


def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8080")],
    token: Annotated[
        str, typer.Option(prompt="API token", hide_input=True, help="An API token (gpd_…).")
    ],
) -> None:
    """Check a token against the server and save both for later commands."""
    try:
        server = normalize_url(url)
    except ConfigError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
    with ApiClient(server, token.strip()) as client:
        user = client.get("/users/me", UserPublic)
    try:
        path = save_config(server, token.strip())
    except ConfigError as exc:
        raise CliError(str(exc)) from exc
    output.print_message(f"Logged in to {server} as {_who(user)}; saved in {path}")
    overriding = [name for name in (URL_ENV, TOKEN_ENV) if os.environ.get(name)]
    if overriding:
        output.print_note(
            f"note: {' and '.join(overriding)} set in this shell take precedence over {path}"
        )


def whoami(json_output: JsonFlag = False) -> None:
    """Show the user the configured token belongs to."""
    config = resolve_config()
    with connect() as client:
        user = client.get("/users/me", UserPublic)
    output.print_answer(
        user, json_output, f"{_who(user)} at {config.url} (token from {config.source})"
    )


@app.command("create")
def create_user(
    name: Annotated[str, typer.Argument(help="Login name, e.g. alice.")],
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an admin.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Create a user and print their API token (shown this one time only)."""
    with connect() as client:
        created = client.post("/users", UserWithTokenPublic, {"name": name, "is_admin": admin})
    if json_output:
        output.print_json(created)
        return
    output.print_message(f"Created {_who(created)}. Their API token:")
    typer.echo(created.token)  # plain, so that it copies and pipes cleanly
    output.print_note(
        "This token is not shown again; gpudock keeps only its digest. "
        f"The user logs in with: gpudock login {client.url} --token <token>"
    )


@app.command("set-password")
def set_password(
    name: Annotated[str, typer.Argument(help="The user whose console password to set.")],
    password: Annotated[
        str,
        typer.Option(
            prompt=True,
            hide_input=True,
            confirmation_prompt=True,
            envvar="GPUDOCK_NEW_PASSWORD",
            help="At least 8 characters; prompted for when not given.",
        ),
    ],
) -> None:
    """Set a user's password for the web console (admin); logs them out of it."""
    with connect() as client:
        client.put(quoted_path("users", name, "password"), UserPublic, {"password": password})
    output.print_message(f"Set the console password of {name}; they log in at {client.url}/")


@app.command("list")
def list_users(
    all_users: Annotated[bool, typer.Option("--all", help="Also list deleted users.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """List users (admin)."""
    params = {"include_deleted": "true"} if all_users else None
    show_collection(
        "/users", list[UserPublic], COLUMNS, _row, json_output=json_output, params=params
    )


def _row(user: UserPublic) -> list[str | Text]:
    state = user.state + (f" ({user.state_reason})" if user.state_reason else "")
    return [
        user.id,
        user.name,
        "yes" if user.is_admin else "",
        Text(state, style=STATE_STYLES.get(user.state, "")),
        output.when(user.created_at),
    ]


@app.command("disable")
def disable(
    name: NameArg,
    reason: Annotated[str | None, typer.Option(help="Why; shown to them and in events.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Disable a user: their tokens, console sessions and SSH keys stop working at
    once, and their instances stop (GPUs released, containers and data kept)."""
    with connect() as client:
        done = client.post(
            quoted_path("users", name, "disable"),
            UserStateChangePublic,
            {"reason": reason} if reason else {},
        )
    stopped = done.instances
    output.print_answer(
        done,
        json_output,
        f"Disabled {_who(done.user)}; "
        + (f"stopping {', '.join(stopped)} (data kept)" if stopped else "no instance was running"),
        note=f"`gpudock users enable {name}` gives access back; instances stay stopped.",
    )


@app.command("enable")
def enable(name: NameArg, json_output: JsonFlag = False) -> None:
    """Give a disabled user access back; their instances stay stopped until started."""
    with connect() as client:
        user = client.post(quoted_path("users", name, "enable"), UserPublic)
    output.print_answer(
        user,
        json_output,
        f"Enabled {_who(user)}; their instances stay stopped until they start them",
    )


@app.command("delete")
def delete(
    name: NameArg,
    force: Annotated[
        bool, typer.Option("--force", help="Also delete their instances and data volumes.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Delete a user (refused while they have instances, unless --force)."""
    if not yes:
        instances = " and their instances" if force else ""
        what = "their instances with containers and data volumes, " if force else ""
        question = DELETE_QUESTION.format(name=name, instances=instances, what=what)
        typer.confirm(question, abort=True, err=True)
    params = {"force": "true"} if force else None
    with connect() as client:
        deleted = client.delete(quoted_path("users", name), UserDeletionPublic, params=params)
    gone = deleted.instances
    output.print_answer(
        deleted,
        json_output,
        f"Deleted {_who(deleted.user)}"
        + (f"; deleting {', '.join(gone)} with their data" if gone else "")
        + f"; balance kept in the ledger: {deleted.balance}",
        note=deleted.retention,
    )


def _who(user: UserPublic) -> str:
    role = " (admin)" if user.is_admin else ""
    return f"{user.name} [{user.id}]{role}"
