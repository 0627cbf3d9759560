"""`gpudock admin gpus …` and `gpudock admin reliability`: GPU health for operators."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpudock.cli import output
from gpudock.cli.client import connect

gpus_app = typer.Typer(
    help="GPU health: inject faults (simulated fleets), drain, repair, list faults.",
    no_args_is_help=True,
)
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
GpuArg = Annotated[str, typer.Argument(metavar="GPU_UUID", help="As `gpudock hosts` shows it.")]


@gpus_app.command("fault")
def fault(
    gpu: GpuArg,
    xid: Annotated[int, typer.Option("--xid", min=1, help="The Xid to report, e.g. 48 or 79.")],
    message: Annotated[str, typer.Option(help="Extra text for the fault record.")] = "",
    json_output: JsonFlag = False,
) -> None:
    """Make a simulated GPU report an Xid, exactly as NVML would on a real host."""
    with connect() as client:
        done = client.post(f"/admin/gpus/{gpu}/faults", {"xid": xid, "message": message})
    if json_output:
        output.print_json(done)
        return
    output.print_message(
        f"GPU {gpu}: {done['message']} → {done['action']}; the GPU is {done['gpu_state']}."
    )


@gpus_app.command("repair")
def repair(gpu: GpuArg, json_output: JsonFlag = False) -> None:
    """Put a GPU back into service once it is fixed (its open faults close)."""
    with connect() as client:
        done = client.post(f"/admin/gpus/{gpu}/repair")
    _state(done, json_output)


@gpus_app.command("drain")
def drain(gpu: GpuArg, json_output: JsonFlag = False) -> None:
    """Maintenance: move the GPU's tenants off it now and place nothing new there."""
    with connect() as client:
        done = client.post(f"/admin/gpus/{gpu}/drain")
    _state(done, json_output)


def _state(done: dict[str, Any], json_output: bool) -> None:
    if json_output:
        output.print_json(done)
        return
    reason = f" — {done['state_reason']}" if done["state_reason"] else ""
    output.print_message(f"GPU {done['uuid']} is {done['state']}{reason}.")


@gpus_app.command("faults")
def list_faults(json_output: JsonFlag = False) -> None:
    """Recent faults, newest first, with what gpudock did about each."""
    with connect() as client:
        faults = client.get("/admin/faults")
    if json_output:
        output.print_json(faults)
        return
    grid = output.table("At", "GPU", "Fault", "Action", "Source", "Repaired")
    output.add_rows(
        grid,
        (
            [
                output.when(f["at"]),
                f["gpu_uuid"],
                f["message"],
                f["action"],
                f["source"],
                output.when(f["repaired_at"]),
            ]
            for f in faults
        ),
    )
    output.show(grid)


def reliability(json_output: JsonFlag = False) -> None:
    """Faults, hours in service, MTBF and migrations per GPU model and per GPU."""
    with connect() as client:
        found = client.get("/admin/reliability")
    if json_output:
        output.print_json(found)
        return
    columns = ("Model", "GPUs", "Hours", "Failures", "MTBF h", "Published MTBF h", "Moves")
    grid = output.table(*columns, "p50 s", "Max s")
    output.add_rows(
        grid,
        (
            [
                m["model"],
                str(m["gpus"]),
                f"{m['hours_in_service']:.1f}",
                str(m["failures"]),
                _num(m["mtbf_hours"]),
                _num(m["reference_mtbf_hours"]),
                str(m["migrations"]),
                _num(m["interruption_p50_s"]),
                _num(m["interruption_max_s"]),
            ]
            for m in found["models"]
        ),
    )
    output.show(grid)
    faulty = [g for g in found["gpus"] if g["faults"]]
    if faulty:
        per_gpu = output.table("GPU", "Host", "State", "Faults", "Failures", "MTBF h")
        output.add_rows(
            per_gpu,
            (
                [
                    g["uuid"],
                    g["host"],
                    g["state"],
                    ", ".join(f"{k}×{v}" for k, v in g["faults"].items()),
                    str(g["failures"]),
                    _num(g["mtbf_hours"]),
                ]
                for g in faulty
            ),
        )
        output.show(per_gpu)


def _num(value: float | None) -> str:
    return output.NONE if value is None else f"{value:g}"
