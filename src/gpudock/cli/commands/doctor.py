"""`gpudock doctor` and `gpudock env export|check`: local, no server needed.

The same code runs inside instances as the single-file `gpudock-doctor`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpudock.cli import output
from gpudock.cli.client import CliError
from gpudock.doctor import env as doctor_env
from gpudock.doctor import report
from gpudock.doctor.bundle import script
from gpudock.doctor.probe import collect

env_app = typer.Typer(help="Reproduce this environment, or check a machine meets needs.")


def doctor(
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    no_torch: Annotated[bool, typer.Option("--no-torch", help="Skip the torch probe.")] = False,
    write_script: Annotated[
        Path | None,
        typer.Option("--write-script", metavar="PATH", help="Write the standalone gpudock-doctor."),
    ] = None,
) -> None:
    """Diagnose driver, GPUs, CUDA and torch; exit 1 when problems are found."""
    if write_script is not None:
        write_script.write_text(script())
        write_script.chmod(0o755)
        output.print_message(f"wrote {write_script}")
        return
    args = (["--json"] if json_output else []) + (["--no-torch"] if no_torch else [])
    raise typer.Exit(report.main(args))


@env_app.command("export")
def export(
    output_dir: Annotated[Path, typer.Option("--output", "-o", help="Bundle directory.")] = Path(
        "gpudock-env"
    ),
    base: Annotated[
        str, typer.Option(envvar="GPUDOCK_IMAGE", help="Image the Dockerfile starts FROM.")
    ] = doctor_env.DEFAULT_BASE,
) -> None:
    """Write requirements.txt, environment.json (Python, CUDA, driver, GPU archs),
    environment.yml under conda, and a Dockerfile FROM the current image."""
    for path in doctor_env.export(output_dir, base, collect()):
        output.print_message(str(path))


@env_app.command("check")
def check(
    min_capability: Annotated[
        str | None, typer.Option(metavar="X.Y", help="Minimum compute capability, e.g. 7.0.")
    ] = None,
    min_gpu_memory: Annotated[
        str | None, typer.Option(metavar="SIZE", help="Minimum memory per GPU, e.g. 32GB.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Verify this machine meets a project's needs; exit 1 if not."""
    args = ["check"] + (["--json"] if json_output else [])
    if min_capability:
        args += ["--min-capability", min_capability]
    if min_gpu_memory:
        try:
            doctor_env.parse_memory_gb(min_gpu_memory)
        except ValueError as exc:
            raise CliError(str(exc), exit_code=2) from exc
        args += ["--min-gpu-memory", min_gpu_memory]
    raise typer.Exit(doctor_env.main(args))
