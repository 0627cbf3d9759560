"""`gpudock gpus` (what can be rented) and `gpudock hosts` (what is where; admin)."""

from __future__ import annotations

from decimal import Decimal

from rich.table import Table
from rich.text import Text

from gpudock.api.schemas import GpuModelPublic, GpuPublic, HostPublic
from gpudock.cli import output
from gpudock.cli.client import connect
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag

COLUMNS = (
    "MODEL",
    "MEMORY",
    "FREE/TOTAL",
    "HOSTS",
    "MAX PER HOST",
    "SHARE FREE",
    "LARGEST SHARE",
    "PRICE/H",
)
NO_GPUS = "No GPUs in this cluster (no-GPU instances: --count 0)."


def list_gpus(json_output: JsonFlag = False) -> None:
    """GPU models in the cluster: memory, free of total, hosts, share capacity
    (GPUs' worth free for shares, the largest share one GPU takes now), price."""
    show_collection(
        "/gpus", list[GpuModelPublic], COLUMNS, _model_row, json_output=json_output, empty=NO_GPUS
    )


def _model_row(model: GpuModelPublic) -> list[str | Text]:
    style = "green" if model.free else "red"
    return [
        model.model,
        output.memory(model.memory_mb),
        Text(f"{model.free}/{model.total}", style=style),
        str(model.hosts),
        str(model.max_per_host),
        milli_gpus(model.share_free_milli),
        milli_gpus(model.largest_share_milli),
        output.text(model.price_per_hour),
    ]


def milli_gpus(milli: int) -> str:
    """Milli-GPU as GPUs: 3500 → '3.5', 250 → '0.25'."""
    return f"{(Decimal(milli) / 1000).normalize():f}"


def list_hosts(json_output: JsonFlag = False) -> None:
    """Hosts and their GPUs, with the instance holding each GPU (admin)."""
    with connect() as client:
        hosts = client.get("/hosts", list[HostPublic])
    if json_output:
        output.print_json(hosts)
        return
    if not hosts:
        output.print_message("No hosts registered.")
        return
    for host in hosts:
        output.show(_host_table(host))


def _holders(gpu: GpuPublic) -> str:
    """The instance holding the GPU whole, or each share on it with its size."""
    if gpu.shares:
        return ", ".join(f"{s.instance_id} ({milli_gpus(s.milli)})" for s in gpu.shares)
    return output.text(gpu.instance_id)


def _host_table(host: HostPublic) -> Table:
    flags = [f for f, on in (("simulated", host.simulated), ("gone", not host.present)) if on]
    title = (
        f"{host.name}  {host.cpus:g} CPUs · {host.memory_gb} GB · "
        f"driver {output.text(host.driver_version)} · CUDA {output.text(host.cuda_version)}"
        + (f" ({', '.join(flags)})" if flags else "")
    )
    grid = output.table("#", "GPU", "MODEL", "MEMORY", "STATE", "INSTANCE", title=title)
    for gpu in host.gpus:
        state = gpu.state if gpu.present else f"{gpu.state}, absent"
        grid.add_row(
            str(gpu.index),
            gpu.uuid,
            gpu.model,
            output.memory(gpu.memory_mb),
            Text(state, style="green" if state == "healthy" else "yellow"),
            _holders(gpu),
        )
    if not host.gpus:
        grid.add_row("", "no GPUs", "", "", "", "")
    return grid
