"""`gpudock images ...`: the catalog, builds through the server, the validation gate,
and `build-base` (the local base image, built on this machine's engine)."""

from __future__ import annotations

import io
import json
import tarfile
import tomllib
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any

import typer

from gpudock.api.image_schemas import (
    BuildEventPublic,
    ImagePublic,
    ValidationEventPublic,
    ValidationReportPublic,
)
from gpudock.cli import output
from gpudock.cli.client import CliError, connect, quoted_path
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag
from gpudock.errors import GpudockError

app = typer.Typer(help="Container images: catalog, builds, validation.", no_args_is_help=True)


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
    # Runs on this machine's engine, not through the server: import the builder
    # and the runtime only when asked to (the CLI starts fast).
    from gpudock.cli.base_image_progress import stage_bars
    from gpudock.images.base_image import BASE_IMAGE, build_base_image
    from gpudock.runtime.docker import DockerRuntime

    try:
        with (
            closing(DockerRuntime(docker_host, host_firewall=False)) as engine,
            stage_bars(output.stderr()) as on_progress,
        ):
            result = build_base_image(
                engine, tag=tag or BASE_IMAGE, force=force, on_progress=on_progress
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


@app.command("build-services")
def build_services(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if it is current.")] = False,
    docker_host: Annotated[
        str | None,
        typer.Option(envvar="GPUDOCK_DOCKER_HOST", help="Docker Engine URL; default: local."),
    ] = None,
) -> None:
    """Build gpudock/jupyter:bookworm (JupyterLab and TensorBoard on the base image);
    pip fetches the wheels on this machine, the build itself runs without network."""
    from gpudock.images.base_image import BASE_IMAGE
    from gpudock.images.service_image import build_services_image
    from gpudock.runtime.docker import DockerRuntime

    output.print_message("fetching wheels and building (a few minutes the first time) …")
    try:
        with closing(DockerRuntime(docker_host, host_firewall=False)) as engine:
            result = build_services_image(engine, base_image=BASE_IMAGE, force=force)
    except GpudockError as exc:
        raise CliError(exc.message) from exc
    state = "cached (built from the same recipe)" if result.cached else "built"
    output.print_message(f"{result.tag}: {state} ({result.image_id[:19]})", "green")


# -- the catalog, builds and validation -------------------------------------
COLUMNS = ("REFERENCE", "FRAMEWORK", "CUDA", "VISIBILITY", "SIZE", "RUNS ON")


@app.command("list")
def list_images(
    gpu: Annotated[
        str | None, typer.Option(metavar="MODEL", help="Only say whether each runs on MODEL.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """The image catalog, and on which GPU models each image runs."""
    show_collection(
        "/images",
        list[ImagePublic],
        COLUMNS,
        lambda image: _row(image, gpu),
        json_output=json_output,
        params={"gpu": gpu} if gpu else None,
    )


def _row(image: ImagePublic, gpu: str | None) -> list[str]:
    runs = image.runs_on
    # 'unknown: …' was not checked (the data does not cover it): shown as 'MODEL?'
    ok = [m if v == "ok" else f"{m}?" for m, v in runs.items() if not _refused(v)]
    mark = ", ".join(ok) or "-"
    if gpu and gpu in runs and runs[gpu] != "ok":
        mark = runs[gpu] if not _refused(runs[gpu]) else f"no: {runs[gpu]}"
    framework = " ".join(filter(None, [image.framework, image.framework_version]))
    size = f"{image.size_bytes / 1e9:.1f} GB" if image.size_bytes else "-"
    return [image.reference, framework or "-", image.cuda or "-", image.visibility, size, mark]


def _refused(verdict: str) -> bool:
    return verdict != "ok" and not verdict.startswith("unknown: ")


def context_tar(context: Path, dockerfile: Path) -> tuple[bytes, str]:
    """The build context as a tar, plus the Dockerfile's path inside it (added if outside)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for child in sorted(context.iterdir()):
            tar.add(child, arcname=child.name, filter=_no_git)
        try:
            inside = dockerfile.resolve().relative_to(context.resolve()).as_posix()
        except ValueError:
            inside = ".gpudock.user.Dockerfile"
            tar.add(dockerfile, arcname=inside)
    return buffer.getvalue(), inside


def _no_git(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if "/.git/" in f"/{info.name}/" else info


@app.command("build")
def build(
    tag: Annotated[str, typer.Option("--tag", "-t", metavar="NAME", help="Image name[:tag].")],
    context: Annotated[Path, typer.Argument(help="Build context directory.")] = Path("."),
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Dockerfile. [default: CONTEXT/Dockerfile]")
    ] = None,
    public: Annotated[bool, typer.Option("--public", help="Publish (admins only).")] = False,
) -> None:
    """Build on the server's Docker Engine, streaming the log; registers a private image."""
    dockerfile = file or context / "Dockerfile"
    if not context.is_dir() or not dockerfile.is_file():
        raise CliError(
            f"need a context directory and a Dockerfile ({dockerfile} not found)", exit_code=2
        )
    data, inside = context_tar(context, dockerfile)
    params = {"name": tag, "dockerfile": inside, "public": str(public).lower()}
    with connect() as client, output.stderr().status(f"building {tag}") as status:
        events = client.stream("/images/build", BuildEventPublic, params=params, content=data)
        for event in events:
            if event.log is not None:
                output.stdout().print(event.log, markup=False, highlight=False)
                if event.log.startswith("Step "):
                    status.update(f"building {tag}: {event.log[:70]}")
            elif event.error is not None:
                raise CliError(f"the build failed: {event.error}")
            elif event.image is not None:
                image = event.image
                output.print_message(
                    f"built {image.reference} ({image.visibility}, id {image.id})", "green"
                )


@app.command("validate")
def validate(
    matrix: Annotated[
        Path | None, typer.Option("--matrix", help="Matrix file (JSON or TOML).")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Build every candidate, smoke-test it, publish those that pass (admins only)."""
    body = {"matrix": _read_matrix(matrix) if matrix else None}
    report: ValidationReportPublic | None = None
    with connect() as client:
        for event in client.stream("/images/validate", ValidationEventPublic, body=body):
            if event.log is not None and not json_output:
                output.stderr().print(event.log, markup=False, highlight=False)
            report = event.report or report
    if report is None:
        raise CliError("the server ended the validation without a report")
    if json_output:
        output.print_json(report)
    else:
        _show_report(report)
    if not report.passed:
        raise CliError(
            f"validation failed: failure rate {report.failure_rate:.1%} is over "
            f"the threshold {report.threshold:.1%}; nothing was published"
        )


def _read_matrix(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the matrix {path}: {exc}", exit_code=2) from exc
    if not isinstance(data, dict):
        raise CliError(f"the matrix {path} must be an object", exit_code=2)
    return data


def _show_report(report: ValidationReportPublic) -> None:
    grid = output.table("CANDIDATE", "STATUS", "FAILED CHECKS")
    for candidate in report.candidates:
        failed = [f"{c.check}: {c.detail}" for c in candidate.checks if not c.ok]
        if candidate.build_error:
            failed.insert(0, f"build: {candidate.build_error}")
        output.add_rows(grid, [[candidate.name, candidate.status, "; ".join(failed) or "-"]])
    output.show(grid)
    output.print_message(
        f"failure rate {report.failure_rate:.1%} (threshold {report.threshold:.1%}); "
        f"published: {', '.join(report.published) or 'nothing'}"
    )


@app.command("delete")
def delete(image_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Remove a registered image (yours; public ones need an admin)."""
    with connect() as client:
        image = client.delete(quoted_path("images", image_id), ImagePublic)
    output.print_message(f"deleted {image.reference}")
