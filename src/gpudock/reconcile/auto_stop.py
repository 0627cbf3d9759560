"""The auto-stop pass: instances past their stop time, idle ones (after a
warning) and, through the liveness pass, those whose main process exited stop
the ordinary way. The rules live in `services.instances.auto_stop`; this pass
only runs them every `GPUDOCK_AUTO_STOP_INTERVAL_S`, on the notifications
thread (its reads cost about a millisecond per idle-watched instance, which
the placement loop should not wait behind)."""

from __future__ import annotations

import logging

from gpudock.services.context import ServiceContext
from gpudock.services.instances.auto_stop import AutoStopReport, auto_stop_pass

log = logging.getLogger(__name__)


def run_auto_stops(ctx: ServiceContext) -> AutoStopReport:
    report = auto_stop_pass(ctx)
    if report.stopped:
        log.info("auto-stopped %s", ", ".join(report.stopped))
    return report
