"""Service URLs from the command line: `gpudock instances services NAME`,
`gpudock instances expose NAME PORT --name N`, `gpudock instances unexpose NAME
SERVICE` and `gpudock open NAME [SERVICE]`."""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer

from gpudock.api.service_schemas import ServiceLinkPublic, ServicePublic
from gpudock.cli import output
from gpudock.cli.client import CliError, connect, quoted_path
from gpudock.cli.commands.options import JsonFlag

RefArg = Annotated[str, typer.Argument(metavar="ID", help="Instance id or name.")]
PREFERRED = ("jupyter", "tensorboard")


def _services(ref: str) -> list[ServicePublic]:
    with connect() as client:
        return client.get(quoted_path("instances", ref, "services"), list[ServicePublic])


def services(ref: RefArg, json_output: JsonFlag = False) -> None:
    """The instance's published ports and their URLs (they open with a console
    login; `gpudock open` prints one with a link token)."""
    found = _services(ref)
    if json_output:
        output.print_json([s.model_dump() for s in found])
        return
    if not found:
        output.print_message(
            f"{ref} publishes no ports; `gpudock instances expose {ref} PORT --name NAME`"
        )
        return
    table = output.table("NAME", "PORT", "KIND", "URL")
    for service in found:
        table.add_row(service.name, str(service.port), service.kind, service.url)
    output.stdout().print(table)


def expose(
    ref: RefArg,
    port: Annotated[int, typer.Argument(min=1, max=65535, help="Port inside the instance.")],
    name: Annotated[
        str, typer.Option("--name", metavar="N", help="The URL's service part, e.g. jupyter.")
    ],
    json_output: JsonFlag = False,
) -> None:
    """Publish PORT of the instance at its own URL (served by the gpudock server)."""
    with connect() as client:
        service = client.post(
            quoted_path("instances", ref, "services"),
            ServicePublic,
            {"name": name, "port": port},
        )
    if json_output:
        output.print_json(service.model_dump())
        return
    output.print_message(f"{service.name} (port {service.port}): {service.url}", "green")


def open_service(
    ref: RefArg,
    service: Annotated[
        str | None,
        typer.Argument(metavar="[SERVICE]", help="Default: jupyter, else the only one."),
    ] = None,
    browser: Annotated[
        bool, typer.Option("--browser", help="Open it in this machine's web browser too.")
    ] = False,
) -> None:
    """Print an instance's service URL (JupyterLab…) with a new link token.

    Anyone holding the link gets in until `gpudock instances revoke-links`."""
    name = service or _default_service(ref)
    with connect() as client:
        link = client.post(
            quoted_path("instances", ref, "services", name, "links"), ServiceLinkPublic
        )
    output.stdout().print(link.url, soft_wrap=True)
    if browser:
        webbrowser.open(link.url)


def _default_service(ref: str) -> str:
    names = [s.name for s in _services(ref)]
    for preferred in PREFERRED:
        if preferred in names:
            return preferred
    if len(names) == 1:
        return names[0]
    if not names:
        raise CliError(
            f"{ref} publishes no ports", hint=f"gpudock instances expose {ref} PORT --name N"
        )
    raise CliError(
        f"{ref} publishes {', '.join(names)}: name one", hint=f"gpudock open {ref} SERVICE"
    )


def unexpose(ref: RefArg, service: Annotated[str, typer.Argument(metavar="SERVICE")]) -> None:
    """Stop publishing the service; its URL and links stop working."""
    with connect() as client:
        client.delete_empty(quoted_path("instances", ref, "services", service))
    output.print_message(f"{ref} no longer publishes {service}")


def revoke_links(ref: RefArg, service: Annotated[str, typer.Argument(metavar="SERVICE")]) -> None:
    """Revoke every link of the service (console logins still get in)."""
    from gpudock.api.service_schemas import ServiceLinksRevokedPublic

    with connect() as client:
        done = client.delete(
            quoted_path("instances", ref, "services", service, "links"), ServiceLinksRevokedPublic
        )
    output.print_message(f"revoked {done.revoked} link(s) of {service}")
