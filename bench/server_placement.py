"""The server's placement pass over 1,000 queued requests, on a real database.

    nice .venv/bin/python -m bench.server_placement [--hosts 300] [--running 1200]
        [--queued 1000] [--policy gpudock] [--database-url URL]

A simulated fleet of `--hosts` hosts with 8 A100s each (2,400 GPUs by default)
on the fake runtime; `--running` 1-GPU instances placed by bulk insert (their
allocations too), then `--queued` waiting instances of mixed shapes (1, 2, 4
and 8 GPUs, shares of 0.25 and 0.5, CPU-only), seeded the same way for every
run. Times one `reconcile.placement.place_waiting` over them (its reads, every
decision, one commit per placement) and, within it, the time in the policy's
decisions (`HostPlacer.place`; `place()` in a tree before them) and in reading
the capacity (with the adapter's `sync`). Run it with
`PYTHONPATH=<checkout>/src` to time another tree's pass on the same data (a
tree before the policies has no `PlacementState`: its pass is timed whole).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpudock.db.models import (
    DesiredState,
    GpuAllocationModel,
    GpuDeviceModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.platform import open_platform
from gpudock.reconcile import placement
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.settings import Settings

MODEL = "A100-80GB"
SHAPES = (  # (GPUs, share milli, weight)
    (1, None, 40),
    (2, None, 10),
    (4, None, 5),
    (8, None, 3),
    (1, 500, 15),
    (1, 250, 15),
    (0, None, 12),
)


def row(owner: str, n: int, gpus: int, share: int | None, gpu: tuple[str, str] | None) -> Any:
    state = InstanceStatus.RUNNING if gpu else InstanceStatus.PENDING
    now = datetime(2026, 12, 2, tzinfo=UTC)
    return InstanceModel(
        id=f"i-bench{n:06}",
        name=f"job-{n}",
        user_id=owner,
        gpu_model=MODEL if gpus else None,
        gpu_count=gpus,
        gpu_share_milli=share,
        image="gpudock/base:bookworm",
        system_image="gpudock/base:bookworm",
        env="{}",
        cpu=1.0,
        memory_gb=1,
        disk_gb=50,
        status=state,
        status_reason=state.value,
        desired_state=DesiredState.RUNNING,
        placed=gpu is not None,
        host_id=gpu[1] if gpu else None,
        container_gpus=gpu[0] if gpu else "",
        container_id=None,
        created_at=now,
        updated_at=now,
        queued_at=now,
    )


def seed(ctx: Any, running: int, queued: int) -> None:
    owner = users.create_user(ctx, "bench").user.id
    rng = random.Random(15)
    shapes = rng.choices(SHAPES, weights=[w for *_, w in SHAPES], k=queued)
    with ctx.sessions.begin() as session:
        gpus = list(session.execute(select(GpuDeviceModel.id, GpuDeviceModel.host_id)).all())
        for n in range(running):
            session.add(row(owner, n, 1, None, gpus[n * 2]))  # every other GPU: spread
        session.flush()
        for n in range(running):
            session.add(
                GpuAllocationModel(
                    gpu_id=gpus[n * 2][0], instance_id=f"i-bench{n:06}", allocated_at=ctx.clock()
                )
            )
        for k, (count, share, _w) in enumerate(shapes):
            session.add(row(owner, running + k, count, share, None))


def timed(totals: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start

    return wrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--running", type=int, default=1200)
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--policy", default="gpudock")
    ap.add_argument("--database-url", default=None)
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        extra = (
            {"placement_policy": a.policy} if "placement_policy" in Settings.model_fields else {}
        )
        settings = Settings(
            data_dir=Path(tmp),
            database_url=a.database_url,
            simulate=f"{a.hosts}x8x{MODEL}",
            runtime="fake",
            image_pull="never",
            ssh_enabled=False,
            **extra,
        )
        platform = open_platform(settings, runtime=FakeRuntime())
        try:
            ctx = platform.ctx
            seed(ctx, a.running, a.queued)
            totals: dict[str, float] = defaultdict(float)
            state_class = getattr(placement, "PlacementState", None)
            start = time.perf_counter()
            if state_class is None:  # the pass before the policies: place() over the list
                placement.place = timed(totals, "decisions", placement.place)  # type: ignore[attr-defined]
                placement.capacity_snapshot = timed(totals, "reads", placement.capacity_snapshot)
                placement.place_waiting(ctx)
            else:
                state = state_class(ctx.settings)
                placer = state.placer
                placer.place = timed(totals, "decisions", placer.place)  # type: ignore[method-assign]
                placer.sync = timed(totals, "sync", placer.sync)  # type: ignore[method-assign]
                state.sync = timed(totals, "reads + sync", state.sync)  # type: ignore[method-assign]
                placement.place_waiting(ctx, state)
            elapsed = time.perf_counter() - start
            with ctx.reader() as session:
                placed = session.query(InstanceModel).filter(InstanceModel.placed.is_(True)).count()
        finally:
            platform.close()
    print(
        f"{a.hosts * 8} GPUs, {a.running} running, {a.queued} queued, policy "
        f"{extra.get('placement_policy', 'place() (before the policies)')}: pass "
        f"{elapsed * 1000:.0f} ms, {placed - a.running} placed"
    )
    for name, seconds in totals.items():
        print(f"  {name}: {seconds * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
