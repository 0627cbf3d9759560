"""`gpudock images build-base`: build the local base image on this machine's engine."""

from __future__ import annotations

from typing import Annotated

import typer

from gpudock.cli import output
from gpudock.cli.client import CliError
from gpudock.errors import GpudockError

app = typer.Typer(help="Container images gpudock builds itself.", no_args_is_help=True)


@app.command("build-base")
def build_base(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if it exists.")] = False,
    tag: Annotated[
        str | None, typer.Option(metavar="T", help="Image tag. [default: gpudock/base:bookworm]")
    ] = None,
    docker_host: Annotated[
        str | None,
        typer.Option(envvar="GPUDOCK_DOCKER_HOST", help="Docker Engine URL; default: local."),
    ] = None,
) -> None:
    """Build the debootstrap base image (needs root and debootstrap), unless it exists."""
    # Runs locally, not through the server: import the builder only when asked to.
    from gpudock.images.base_image import BASE_IMAGE, build_base_image, rich_progress

    try:
        with rich_progress(output.stderr()) as on_progress:
            result = build_base_image(
                tag=tag or BASE_IMAGE,
                force=force,
                docker_host=docker_host,
                on_progress=on_progress,
            )
    except GpudockError as exc:
        raise CliError(exc.message) from exc
    if result.cached:
        output.print_message(
            f"{result.tag}: cached (already on the engine, {result.image_id[:19]}); "
            "--force rebuilds it"
        )
        return
    size_mb = result.size_bytes / 1e6
    output.print_message(
        f"{result.tag}: built in {result.seconds:.0f} s, {size_mb:.0f} MB ({result.image_id[:19]})",
        "green",
    )
