"""`gpudock admin gpus …` and `gpudock admin reliability`: GPU health for operators."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gpudock.api.health_schemas import (
    FaultPublic,
    GpuReliabilityPublic,
    GpuStatePublic,
    ModelReliabilityPublic,
    ReliabilityPublic,
)
from gpudock.cli import output
from gpudock.cli.client import connect, quoted_path
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag

gpus_app = typer.Typer(
    help="GPU health: inject faults (simulated fleets), drain, repair, list faults.",
    no_args_is_help=True,
)
GpuArg = Annotated[str, typer.Argument(metavar="GPU_UUID", help="As `gpudock hosts` shows it.")]
FAULT_COLUMNS = ("At", "GPU", "Fault", "Action", "Source", "Repaired")
MODEL_COLUMNS = (
    "Model", "GPUs", "Hours", "Failures", "MTBF h", "Published MTBF h", "Moves", "p50 s", "Max s",
)  # fmt: skip
GPU_COLUMNS = ("GPU", "Host", "State", "Faults", "Failures", "MTBF h")


@gpus_app.command("fault")
def fault(
    gpu: GpuArg,
    xid: Annotated[int, typer.Option("--xid", min=1, help="The Xid to report, e.g. 48 or 79.")],
    message: Annotated[str, typer.Option(help="Extra text for the fault record.")] = "",
    json_output: JsonFlag = False,
) -> None:
    """Make a simulated GPU report an Xid, exactly as NVML would on a real host."""
    with connect() as client:
        done = client.post(
            quoted_path("admin", "gpus", gpu, "faults"),
            FaultPublic,
            {"xid": xid, "message": message},
        )
    said = f"GPU {gpu}: {done.message} → {done.action}; the GPU is {done.gpu_state}."
    output.print_answer(done, json_output, said)


@gpus_app.command("repair")
def repair(gpu: GpuArg, json_output: JsonFlag = False) -> None:
    """Put a GPU back into service once it is fixed (its open faults close)."""
    _change_state(gpu, "repair", json_output)


@gpus_app.command("drain")
def drain(gpu: GpuArg, json_output: JsonFlag = False) -> None:
    """Maintenance: move the GPU's tenants off it now and place nothing new there."""
    _change_state(gpu, "drain", json_output)


def _change_state(gpu: str, action: str, json_output: bool) -> None:
    with connect() as client:
        done = client.post(quoted_path("admin", "gpus", gpu, action), GpuStatePublic)
    reason = f" — {done.state_reason}" if done.state_reason else ""
    output.print_answer(done, json_output, f"GPU {done.uuid} is {done.state}{reason}.")


@gpus_app.command("faults")
def list_faults(json_output: JsonFlag = False) -> None:
    """Recent faults, newest first, with what gpudock did about each."""
    show_collection(
        "/admin/faults", list[FaultPublic], FAULT_COLUMNS, _fault_row, json_output=json_output
    )


def _fault_row(fault: FaultPublic) -> list[str | Text]:
    return [
        output.when(fault.at),
        fault.gpu_uuid,
        fault.message,
        fault.action,
        fault.source,
        output.when(fault.repaired_at),
    ]


def reliability(json_output: JsonFlag = False) -> None:
    """Faults, hours in service, MTBF and migrations per GPU model and per GPU."""
    with connect() as client:
        found = client.get("/admin/reliability", ReliabilityPublic)
    if json_output:
        output.print_json(found)
        return
    output.print_listing(found.models, MODEL_COLUMNS, _model_row)
    faulty = [g for g in found.gpus if g.faults]
    if faulty:
        output.print_listing(faulty, GPU_COLUMNS, _gpu_row)


def _model_row(m: ModelReliabilityPublic) -> list[str | Text]:
    return [
        m.model,
        str(m.gpus),
        f"{m.hours_in_service:.1f}",
        str(m.failures),
        _num(m.mtbf_hours),
        _num(m.reference_mtbf_hours),
        str(m.migrations),
        _num(m.interruption_p50_s),
        _num(m.interruption_max_s),
    ]


def _gpu_row(g: GpuReliabilityPublic) -> list[str | Text]:
    faults = ", ".join(f"{kind}×{count}" for kind, count in g.faults.items())
    return [g.uuid, g.host, g.state, faults, str(g.failures), _num(g.mtbf_hours)]


def _num(value: float | None) -> str:
    return output.NONE if value is None else f"{value:g}"
