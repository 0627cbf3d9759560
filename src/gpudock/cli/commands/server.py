"""`gpudock server`: the one command that runs the platform in this process.

It is the composition root's caller, so it alone imports the API app and the platform.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gpudock.cli import output
from gpudock.cli.failures import EXIT_ERROR, EXIT_USAGE, CliError
from gpudock.errors import GpudockError, RuntimeFailure

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpudock.platform import Platform
    from gpudock.settings import Settings

FLAGS = frozenset(
    {"data_dir", "host", "port", "simulate", "database_url", "docker_host", "ssh_port"}
)


def serve(
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Database, admin token and keys. [env: GPUDOCK_DATA_DIR]"),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on. [default: 127.0.0.1]")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on. [default: 8080]")] = None,
    simulate: Annotated[
        str | None,
        typer.Option(
            metavar="SPEC",
            help="Simulated fleet instead of NVML, e.g. '2x8xA100-80GB,1x4xRTX4090-24GB'.",
        ),
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="SQLAlchemy URL; default: SQLite in the data dir.")
    ] = None,
    docker_host: Annotated[
        str | None, typer.Option(help="Docker Engine URL; default: the local socket.")
    ] = None,
    ssh_port: Annotated[
        int | None,
        typer.Option(
            help="SSH gateway port; GPUDOCK_SSH_ENABLED=false turns the gateway off. "
            "[default: 2222]"
        ),
    ] = None,
) -> None:
    """Run the gpudock API server and its reconciler (GPUDOCK_* variables configure it)."""
    flags = {
        "data_dir": data_dir,
        "host": host,
        "port": port,
        "simulate": simulate,
        "database_url": database_url,
        "docker_host": docker_host,
        "ssh_port": ssh_port,
    }
    _run(_settings({k: v for k, v in flags.items() if v is not None}))


def _run(settings: Settings) -> None:
    """Open the database, listen, load the rest of the server while answering
    probes (api/staged.py); serve until stopped, then close the platform."""
    import uvicorn

    from gpudock.api.heap import settle_heap
    from gpudock.api.staged import StagedApp
    from gpudock.platform import default_gpu_source, open_database

    _log_to_stderr(settings.log_level)

    try:
        engine = open_database(settings)
        gpu_source = default_gpu_source(settings)
    except GpudockError as exc:
        raise _cannot_start(exc) from exc
    opened: list[Platform] = []

    def load() -> FastAPI:
        from gpudock.api.app import create_app
        from gpudock.platform import open_platform

        platform = open_platform(settings, engine=engine, gpu_source=gpu_source)
        opened.append(platform)
        if platform.admin_token_path is not None:
            output.print_note(
                f"Created the first admin; its API token is in {platform.admin_token_path}"
            )
        _add_ssh_gateway(platform, settings)
        _add_agent_gateway(platform, settings)
        return create_app(platform)

    staged = StagedApp(load, service_domain=settings.service_domain, on_ready=settle_heap)
    server = uvicorn.Server(
        uvicorn.Config(
            staged,
            host=settings.host,
            port=settings.port,
            log_level="info",
            access_log=settings.access_log,
            timeout_keep_alive=settings.http_keep_alive_s,
        )
    )
    staged.on_failure = lambda _exc: setattr(server, "should_exit", True)
    try:
        server.run()
    finally:
        for platform in opened:
            platform.close()
        engine.dispose()
    if staged.failure is not None:
        raise _cannot_start(staged.failure) from staged.failure
    if not server.started:
        raise CliError(
            f"cannot start the server: nothing listens on {settings.host}:{settings.port} "
            "(uvicorn's error is above; is the port taken?)",
            exit_code=EXIT_ERROR,
        )


def _log_to_stderr(level: str) -> None:
    """gpudock's own loggers at `level`; at the default (warning) a line is just its
    message, as before, and below it each line says when and where it came from."""
    handler = logging.StreamHandler()
    if level != "warning":
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("gpudock")
    root.addHandler(handler)
    root.setLevel(level.upper())


def _cannot_start(exc: Exception) -> CliError:
    if not isinstance(exc, GpudockError):
        return CliError(f"cannot start the server: {exc}", exit_code=EXIT_ERROR)
    code = EXIT_ERROR if isinstance(exc, RuntimeFailure) else EXIT_USAGE
    return CliError(f"cannot start the server: {exc.message}", exit_code=code)


def _add_ssh_gateway(platform: Platform, settings: Settings) -> None:
    """The SSH gateway runs on the API's event loop, started by its lifespan."""
    if not settings.ssh_enabled:
        return
    from gpudock.sshgw.gateway import SshGateway

    platform.sidecars.append(SshGateway(platform.ctx))
    output.print_note(
        f"SSH gateway on {settings.ssh_host}:{settings.ssh_port} "
        "(`gpudock instances show NAME` prints each instance's ssh command)"
    )


def _add_agent_gateway(platform: Platform, settings: Settings) -> None:
    """Agents of other hosts dial in here, when the operator opened a port for them."""
    if settings.agent_link_port is None:
        return
    from gpudock.agentgw.gateway import AgentGateway

    platform.sidecars.append(AgentGateway(platform.ctx))
    output.print_note(
        f"Agent link on {settings.agent_link_host}:{settings.agent_link_port} "
        "(`gpudock hosts add NAME` prints a host's join command)"
    )


def _settings(overrides: dict[str, Any]) -> Settings:
    """Settings from GPUDOCK_* variables, with the flags the user gave on top."""
    # Imported here, as the platform is: every other command starts without them.
    from gpudock.settings import Settings

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors())
        raise CliError(f"bad settings: {problems}", exit_code=EXIT_USAGE) from exc


def _describe(error: ErrorDetails) -> str:
    name = ".".join(str(part) for part in error["loc"]) or "settings"
    where = f"GPUDOCK_{name.upper()}"
    if name in FLAGS:
        where = f"--{name.replace('_', '-')} or {where}"
    return f"{name} ({where}): {error['msg']}"
