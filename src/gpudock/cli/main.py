"""`gpudock`: the Typer app and its entry point.

Exit codes: 0 ok, 1 the server or the runtime failed or refused, 2 bad usage.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from gpudock.cli import output
from gpudock.cli.client import CliError
from gpudock.cli.commands import (
    billing,
    doctor,
    gpus,
    health,
    images,
    instances,
    keys,
    scheduler,
    server,
    ssh,
    tokens,
    users,
)


class CliGroup(TyperGroup):
    """Turns every CliError raised below it into a red message and its exit code."""

    def invoke(self, ctx: Any) -> Any:  # Any: Typer's Context class is private
        try:
            return super().invoke(ctx)
        except CliError as exc:
            output.print_error(exc.message, exc.hint)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    name="gpudock",
    cls=CliGroup,
    help="gpudock: GPU containers on your own servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold API tokens
)
app.command("server")(server.serve)
app.command("login")(users.login)
app.command("whoami")(users.whoami)
app.add_typer(users.app, name="users")
app.add_typer(tokens.app, name="tokens")
app.command("gpus")(gpus.list_gpus)
app.command("hosts")(gpus.list_hosts)
app.add_typer(instances.app, name="instances")
app.add_typer(keys.app, name="keys")
app.command("ssh")(ssh.ssh)
app.command("ssh-config")(ssh.ssh_config)
app.add_typer(images.app, name="images")
app.add_typer(billing.app, name="billing")
app.add_typer(billing.admin_app, name="admin")
billing.admin_app.add_typer(health.gpus_app, name="gpus")
billing.admin_app.command("reliability")(health.reliability)
app.command("doctor")(doctor.doctor)
app.add_typer(doctor.env_app, name="env")
app.add_typer(scheduler.app, name="scheduler")


def main() -> None:
    app()
