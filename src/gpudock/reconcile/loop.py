"""The reconciler: converges the runtime to the database's desired state.

One thread runs the loop: a table of passes (`reconcile.<pass>`), each run
when its interval is due; per-instance lifecycle steps run on a worker pool,
each row under a lease that a heartbeat keeps while the step's I/O runs. The
loop wakes on every API change and at `GPUDOCK_RECONCILE_INTERVAL_S`.

Notifications have a thread of their own too (`gpudock-notifications`): a
webhook that takes its whole timeout must delay nothing but other deliveries.
The auto-stop pass runs there as well: it reads every idle-watched instance's
samples (about a millisecond each), which placement should not wait behind.

Charging has a thread of its own, woken every `GPUDOCK_BILLING_TICK_S`: a pass
over thousands of priced instances takes a good part of a second, and placement
must never wait behind it. The two share nothing but the database, and take row
locks in the same order (instances, then intervals, then accounts), so they can
run at the same moment; a charge committed twice is impossible either way (each
posting has an idempotency key).

Sampling (`reconcile.sampling`) has a third thread, every
`GPUDOCK_METRICS_INTERVAL_S`: it reads every running container from the
engine. Charging and sampling step aside for requests in flight between their
short pieces of work (`services.foreground`): they are due within a period,
not at a moment, and a request waits behind whatever computes beside it.

Each pass's last duration is kept in `ctx.pass_durations` (Prometheus exports it).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import func, select

from gpudock.db.models import (
    InstanceEventModel,
    InstanceStatus,
)
from gpudock.reconcile import (
    auto_stop,
    charging,
    fencing,
    garbage,
    gpu_health,
    host_loss,
    lifecycle,
    liveness,
    notifications,
    placement,
    sampling,
    share_watch,
    slow_steps,
    system_disks,
)
from gpudock.services.context import ServiceContext
from gpudock.services.leases import release_at_startup
from gpudock.services.metrics.sampling import SamplerState

log = logging.getLogger(__name__)
S = InstanceStatus
GC_INTERVAL_S = 60.0
SLOW_STEP_CHECK_S = 5.0
FENCE_CHECK_S = 2.0  # how soon a host whose link came up is checked for astray containers


@dataclass
class _Pass:
    """One background pass and how often it runs (None: every tick)."""

    name: str
    run: Callable[[], object]
    interval_s: float | None = None
    last_run: float = -math.inf

    def due(self, now: float) -> bool:
        return self.interval_s is None or now - self.last_run >= self.interval_s


def _run_due(passes: list[_Pass], durations: dict[str, float], *, isolate: bool) -> None:
    now = time.monotonic()
    for due in (p for p in passes if p.due(now)):
        due.last_run = now
        try:
            due.run()
        except Exception:
            if not isolate:
                raise
            log.exception("reconciler pass %r failed", due.name)
        finally:
            durations[due.name] = time.monotonic() - due.last_run


class Reconciler:
    """Runs the passes in order, each when it is due; `tick()` is one round."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(ctx.settings.reconcile_workers, "gpudock-reconcile")
        self._in_flight: dict[str, Future[None]] = {}
        self.step_watch = slow_steps.StepWatch(ctx.settings.slow_step_s)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._charging_thread: threading.Thread | None = None
        self._notify_thread: threading.Thread | None = None
        self._metrics_thread: threading.Thread | None = None
        self.durations = ctx.pass_durations
        health_watch, disk_watch = gpu_health.HealthWatch(), system_disks.DiskWatch()
        shares_watch, loss_watch = share_watch.ShareWatch(), host_loss.LossWatch()
        fence_watch = fencing.FenceWatch()
        self.placement = placement.PlacementState(ctx.settings)  # the policy, kept between passes
        settings = ctx.settings
        self._passes = [
            _Pass("garbage", lambda: garbage.collect_garbage(ctx), GC_INTERVAL_S),
            _Pass("host loss", lambda: host_loss.host_loss_pass(ctx, loss_watch)),
            _Pass("fencing", lambda: fencing.fence_pass(ctx, fence_watch), FENCE_CHECK_S),
            _Pass("moves off failed GPUs", lambda: gpu_health.converge(ctx)),
            _Pass("placement", lambda: placement.place_waiting(ctx, self.placement)),
            _Pass("lifecycle steps", self._submit_active),
            _Pass("slow steps", self.step_watch.report, SLOW_STEP_CHECK_S),
            _Pass(
                "GPU health",
                lambda: gpu_health.health_pass(ctx, health_watch),
                settings.gpu_health_interval_s,
            ),
            _Pass(
                "liveness", lambda: liveness.check_running(ctx), settings.health_check_interval_s
            ),
            *(
                [
                    _Pass(
                        "inventory",
                        lambda: gpu_health.refresh_inventory(ctx),
                        settings.inventory_interval_s,
                    )
                ]
                if ctx.gpu_source.hosts_change
                else []
            ),
            _Pass(
                "system disks",
                lambda: system_disks.check_system_disks(ctx, disk_watch),
                settings.system_disk_check_interval_s,
            ),
            _Pass(
                "share memory",
                lambda: share_watch.watch_shares(ctx, shares_watch),
                settings.share_watch_interval_s,
            ),
        ]
        self._charging = [
            _Pass("charging", lambda: charging.charge_pass(ctx), settings.billing_tick_s)
        ]
        self._notifying = [
            _Pass(
                "auto-stop", lambda: auto_stop.run_auto_stops(ctx), settings.auto_stop_interval_s
            ),
            _Pass(
                "notifications",
                lambda: notifications.notification_pass(ctx),
                settings.notify_interval_s,
            ),
        ]
        sampler_state = SamplerState()
        self._metrics = [
            _Pass(
                "samples",
                lambda: sampling.sample_pass(ctx, sampler_state),
                settings.metrics_interval_s,
            ),
            _Pass(
                "downsampling",
                lambda: sampling.downsample_pass(ctx),
                sampling.DOWNSAMPLE_INTERVAL_S,
            ),
        ]

    # -- lifecycle of the loop itself ---------------------------------------
    def start(self) -> None:
        released = release_at_startup(self._ctx)
        if released.own or released.expired:
            log.info(
                "cleared %d leases of this server's previous run and %d expired ones",
                released.own,
                released.expired,
            )
        self._thread = threading.Thread(target=self._loop, name="gpudock-reconciler", daemon=True)
        self._thread.start()
        self._charging_thread = threading.Thread(
            target=self._charging_loop, name="gpudock-charging", daemon=True
        )
        self._charging_thread.start()
        self._notify_thread = threading.Thread(
            target=self._notify_loop, name="gpudock-notifications", daemon=True
        )
        self._notify_thread.start()
        self._metrics_thread = threading.Thread(
            target=self._metrics_loop, name="gpudock-metrics", daemon=True
        )
        self._metrics_thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        threads = (self._thread, self._charging_thread, self._notify_thread, self._metrics_thread)
        for thread in threads:
            if thread is not None:
                thread.join(timeout=30)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            self.tick(isolate=True)
            self._wake.wait(self._ctx.settings.reconcile_interval_s)

    def _charging_loop(self) -> None:
        """Its own tick, not the placement loop's wake-ups: charging follows the clock."""
        while not self._stopping.is_set():
            self.charging_tick(isolate=True)
            self._stopping.wait(self._ctx.settings.billing_tick_s)

    def _notify_loop(self) -> None:
        """Deliveries wait on other servers; nothing else waits on them."""
        while not self._stopping.is_set():
            self.notify_tick(isolate=True)
            self._stopping.wait(self._ctx.settings.notify_interval_s)

    def _metrics_loop(self) -> None:
        while not self._stopping.is_set():
            self.metrics_tick(isolate=True)
            self._stopping.wait(min(self._ctx.settings.metrics_interval_s, 1.0))

    # -- one round -------------------------------------------------------------
    def tick(self, *, isolate: bool = False) -> None:
        """Run every pass of the placement loop that is due. `isolate`: a failing
        pass is logged and the others still run (the loop); otherwise it raises (tests)."""
        _run_due(self._passes, self.durations, isolate=isolate)

    def charging_tick(self, *, isolate: bool = False) -> None:
        """One round of the charging thread (the charging pass, when due)."""
        _run_due(self._charging, self.durations, isolate=isolate)

    def metrics_tick(self, *, isolate: bool = False) -> None:
        """One round of the metrics thread (samples and downsampling, when due)."""
        _run_due(self._metrics, self.durations, isolate=isolate)

    def notify_tick(self, *, isolate: bool = False) -> None:
        """One round of the notifications thread (auto-stops, GPU watches, deliveries)."""
        _run_due(self._notifying, self.durations, isolate=isolate)

    def make_due(self, *names: str) -> None:
        """Have the named passes run at the next tick, whatever their interval."""
        every = [*self._passes, *self._charging, *self._notifying, *self._metrics]
        known = {p.name: p for p in every}
        for name in names:
            known[name].last_run = -math.inf

    def _submit_active(self) -> None:
        with self._ctx.reader() as session:
            ids = lifecycle.active_instance_ids(session)
        for instance_id in ids:
            self._submit(instance_id)

    def _submit(self, instance_id: str) -> None:
        with self._lock:
            running = self._in_flight.get(instance_id)
            if running is not None and not running.done():
                return
            future = self._pool.submit(self._advance, instance_id)
            self._in_flight[instance_id] = future

    def _advance(self, instance_id: str) -> None:
        self.step_watch.started(instance_id)
        try:
            lifecycle.advance(self._ctx, instance_id)
        except Exception:
            log.exception("instance %s: step failed", instance_id)
        finally:
            self.step_watch.finished(instance_id)
            self._wake.set()  # a step may unlock the next one (e.g. placement)

    def drain(self, timeout_s: float = 60.0) -> None:
        """Run passes until one changes nothing and nothing is in flight (tests)."""
        deadline = time.monotonic() + timeout_s
        last_seen = -1
        while time.monotonic() < deadline:
            self.tick()
            self.charging_tick()
            with self._lock:
                futures = list(self._in_flight.values())
            for future in futures:
                future.result(timeout=max(0.1, deadline - time.monotonic()))
            with self._ctx.sessions() as session:
                newest = session.scalar(select(func.max(InstanceEventModel.id))) or 0
                if newest == last_seen and not lifecycle.active_instance_ids(session):
                    return
            last_seen = newest
        raise TimeoutError("the reconciler did not settle in time")
