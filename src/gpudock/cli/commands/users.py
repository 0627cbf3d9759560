"""`gpudock login`, `gpudock whoami` and `gpudock users ...`."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from gpudock.cli import output
from gpudock.cli.client import EXIT_USAGE, ApiClient, CliError, connect, resolve_config
from gpudock.cli.config import TOKEN_ENV, URL_ENV, ConfigError, normalize_url, save_config

app = typer.Typer(help="Users and their API tokens (admin).", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]


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
        user = client.get("/users/me")
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
        user = client.get("/users/me")
    if json_output:
        output.print_json(user)
        return
    output.print_message(f"{_who(user)} at {config.url} (token from {config.source})")


@app.command("create")
def create_user(
    name: Annotated[str, typer.Argument(help="Login name, e.g. alice.")],
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an admin.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Create a user and print their API token (shown this one time only)."""
    with connect() as client:
        created = client.post("/users", {"name": name, "is_admin": admin})
    if json_output:
        output.print_json(created)
        return
    output.print_message(f"Created {_who(created)}. Their API token:")
    typer.echo(created["token"])  # plain, so that it copies and pipes cleanly
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
        client.request("PUT", f"/users/{name}/password", {"password": password})
    output.print_message(f"Set the console password of {name}; they log in at {client.url}/")


@app.command("list")
def list_users(json_output: JsonFlag = False) -> None:
    """List users (admin)."""
    with connect() as client:
        users = client.get("/users")
    if json_output:
        output.print_json(users)
        return
    grid = output.table("ID", "NAME", "ADMIN", "CREATED")
    output.add_rows(
        grid,
        (
            (u["id"], u["name"], "yes" if u["is_admin"] else "", output.when(u["created_at"]))
            for u in users
        ),
    )
    output.show(grid)


def _who(user: dict[str, Any]) -> str:
    role = " (admin)" if user.get("is_admin") else ""
    return f"{user['name']} [{user['id']}]{role}"
