"""Faults an agent read from its host's NVML: each journal record recorded once.

The agent numbers its records and sends those the server has not acknowledged
with every heartbeat (`gpudock.agent.health`); the host's row keeps the highest
number recorded, in the same transaction as the faults, so a record sent twice
(its acknowledgement lost, the agent restarted) is recorded once, and a server
killed mid-way records all of a heartbeat's records or none.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from gpudock.db.models import AgentHostModel
from gpudock.gpu.base import HealthEvent
from gpudock.link.wire import HealthRecord
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.gpu_health import record_fault_in

log = logging.getLogger(__name__)
SOURCE = "agent"
# A record older than this when it arrives says when the host saw it.
LATE_AFTER = timedelta(seconds=10)


def record_agent_health(ctx: ServiceContext, host_id: str, records: list[HealthRecord]) -> int:
    """Record the records not recorded yet as faults of `host_id`'s GPUs; the highest
    number now recorded (what the agent may drop from its journal). A GPU that is
    not this host's is ignored, never recorded against another host."""
    now = ctx.clock()
    recorded = 0
    with ctx.sessions.begin() as session:
        row = session.get(AgentHostModel, host_id, with_for_update=True)
        if row is None:
            return 0  # removed: the heartbeat is refused anyway
        for record in sorted(records, key=lambda r: r.seq):
            if record.seq <= row.health_seq:
                continue
            event = HealthEvent(record.gpu_uuid, record.kind, record.xid, _message(record, now))
            if record_fault_in(session, event, SOURCE, now, host_id=host_id) is not None:
                recorded += 1
            row.health_seq = record.seq
        through = row.health_seq
    if recorded:
        log.warning("host %s: %d GPU fault(s) from its agent", host_id, recorded)
        ctx.wake_reconciler()
    return through


def _message(record: HealthRecord, now: datetime) -> str:
    if now - record.seen_at <= LATE_AFTER:
        return record.message
    seen = f"seen by the host's agent at {record.seen_at:%Y-%m-%d %H:%M:%S} UTC"
    return f"{record.message} ({seen})" if record.message else seen
