"""`gpudock instances top` and `gpudock instances metrics NAME --since 1h`."""

from __future__ import annotations

import csv
import io
import time
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from gpudock.api.metrics_schemas import InstanceMetricsPublic, InstanceTopPublic, SamplePublic
from gpudock.cli import output
from gpudock.cli.client import ApiClient, connect, quoted_path
from gpudock.cli.commands.options import JsonFlag

TOP_COLUMNS = ("NAME", "GPUS", "HOST", "CPU", "MEMORY", "GPU UTIL", "GPU MEMORY", "NET IN/OUT")
CSV_COLUMNS = (
    "at",
    "resolution_s",
    "cpu_percent",
    "memory_bytes",
    "data_disk_bytes",
    "system_disk_bytes",
    "disk_read_bps",
    "disk_write_bps",
    "net_rx_bps",
    "net_tx_bps",
)
NOTHING_RUNS = "No running instance has a sample yet (samples come every few seconds)."


def _percent(value: float | None) -> str:
    return output.NONE if value is None else f"{value:.0f} %"


def _rate(value: float | None) -> str:
    if value is None:
        return output.NONE
    for unit in ("B/s", "KiB/s", "MiB/s"):
        if value < 1024:
            return f"{value:.0f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB/s"


def _gpu_columns(sample: SamplePublic) -> tuple[str, str]:
    if not sample.gpus:
        return output.NONE, output.NONE
    util = " ".join(_percent(g.utilisation_percent) for g in sample.gpus)
    memory = " ".join(
        output.NONE if g.memory_used_mb is None else output.memory(int(g.memory_used_mb))
        for g in sample.gpus
    )
    return util, memory


def top_table(rows: list[InstanceTopPublic]) -> Table:
    grid = output.table(*TOP_COLUMNS)
    for row in rows:
        s = row.sample
        util, gpu_memory = _gpu_columns(s)
        grid.add_row(
            row.name,
            f"{len(s.gpus)} × {row.gpu_model}" if s.gpus and row.gpu_model else output.NONE,
            row.host,
            _percent(s.cpu_percent),
            output.memory(s.memory_bytes // 2**20),
            util,
            gpu_memory,
            f"{_rate(s.net_rx_bps)} / {_rate(s.net_tx_bps)}",
        )
    return grid


def _latest(client: ApiClient) -> list[InstanceTopPublic]:
    return client.get("/metrics/instances", list[InstanceTopPublic])


def top(
    once: Annotated[bool, typer.Option("--once", help="Print the table once and exit.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=1, metavar="S", help="Refresh every S seconds.")
    ] = 5.0,
    json_output: JsonFlag = False,
) -> None:
    """Your running instances' latest CPU, memory, GPU and network figures, refreshed
    live until Ctrl-C."""
    with connect() as client:
        rows = _latest(client)
        if json_output:
            output.print_json(rows)
            return
        if once:
            if rows:
                output.show(top_table(rows))
            else:
                output.print_note(NOTHING_RUNS)
            return
        with Live(top_table(rows), console=output.stdout(), auto_refresh=False) as live:
            try:
                while True:
                    time.sleep(interval)  # the refresh period, not a synchronisation
                    live.update(top_table(_latest(client)), refresh=True)
            except KeyboardInterrupt:
                pass


def metrics(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Instance id or name.")],
    since: Annotated[
        str, typer.Option("--since", metavar="DURATION", help="How far back: 30m, 1h, 7d, 2w.")
    ] = "1h",
    csv_output: Annotated[bool, typer.Option("--csv", help="One CSV row per sample.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """An instance's samples since a while ago: CPU, memory, disks, network and each GPU."""
    with connect() as client:
        found = client.get(
            quoted_path("instances", ref, "metrics"), InstanceMetricsPublic, params={"since": since}
        )
    if json_output:
        output.print_json(found)
    elif csv_output:
        typer.echo(samples_csv(found), nl=False)
    else:
        output.show(samples_table(found))


def samples_csv(found: InstanceMetricsPublic) -> str:
    """One row per sample; a pair of columns per GPU (gpuN_utilisation_percent, gpuN_memory_mb)."""
    width = max((len(s.gpus) for s in found.samples), default=0)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    gpu_columns = [
        f"gpu{i}_{what}" for i in range(width) for what in ("utilisation_percent", "memory_mb")
    ]
    writer.writerow([*CSV_COLUMNS, *gpu_columns])
    for sample in found.samples:
        figures = sample.model_dump()
        row = [figures["at"].isoformat(), *(figures[c] for c in CSV_COLUMNS[1:])]
        for i in range(width):
            gpu = sample.gpus[i] if i < len(sample.gpus) else None
            row += [None, None] if gpu is None else [gpu.utilisation_percent, gpu.memory_used_mb]
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


def samples_table(found: InstanceMetricsPublic) -> Table:
    grid = output.table(
        "AT", "CPU", "MEMORY", "GPU UTIL", "GPU MEMORY", "DISK R/W", "NET IN/OUT",
        title=f"{found.name}: {len(found.samples)} samples since {output.when(found.since)}",
    )  # fmt: skip
    for s in found.samples:
        util, gpu_memory = _gpu_columns(s)
        grid.add_row(
            output.when(s.at),
            _percent(s.cpu_percent),
            output.memory(s.memory_bytes // 2**20),
            util,
            gpu_memory,
            f"{_rate(s.disk_read_bps)} / {_rate(s.disk_write_bps)}",
            f"{_rate(s.net_rx_bps)} / {_rate(s.net_tx_bps)}",
        )
    return grid
