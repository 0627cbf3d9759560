"""NVIDIA Xid errors → what gpudock does about them, as data.

Rows follow NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) and its
"GPU recovery" guidance: errors an application causes leave the GPU healthy;
errors that need a GPU reset drain the GPU and move its tenants; a GPU that
fell off the bus takes its host with it; predictive errors (row remapping,
high single-bit rates) move tenants at their next safe point.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.StrEnum):
    NOTIFY = "notify"  # tell the tenant; the GPU stays healthy
    MIGRATE = "migrate"  # drain the GPU, move its tenants now
    MIGRATE_DEFERRED = "migrate_deferred"  # drain; move tenants at their next stop/restart
    DRAIN_HOST = "drain_host"  # drain every GPU of the host, move all of its tenants


@dataclass(frozen=True)
class XidRule:
    xid: int
    name: str
    action: Action


XID_RULES: dict[int, XidRule] = {
    rule.xid: rule
    for rule in (
        XidRule(13, "graphics engine exception", Action.NOTIFY),
        XidRule(31, "GPU memory page fault", Action.NOTIFY),
        XidRule(43, "GPU stopped processing", Action.NOTIFY),
        XidRule(45, "preemptive cleanup, due to previous errors", Action.NOTIFY),
        XidRule(48, "double-bit ECC error", Action.MIGRATE),
        XidRule(61, "internal micro-controller breakpoint/warning", Action.MIGRATE),
        XidRule(62, "internal micro-controller halt", Action.MIGRATE),
        XidRule(63, "ECC page retirement or row remapping event", Action.MIGRATE_DEFERRED),
        XidRule(64, "ECC page retirement or row remapper recording failure", Action.MIGRATE),
        XidRule(68, "video processor exception", Action.NOTIFY),
        XidRule(74, "NVLink error", Action.MIGRATE),
        XidRule(79, "GPU has fallen off the bus", Action.DRAIN_HOST),
        XidRule(92, "high single-bit ECC error rate", Action.MIGRATE_DEFERRED),
        XidRule(94, "contained ECC error", Action.NOTIFY),
        XidRule(95, "uncontained ECC error", Action.MIGRATE),
        XidRule(109, "context switch timeout", Action.MIGRATE),
        XidRule(119, "GSP RPC timeout", Action.MIGRATE),
        XidRule(120, "GSP error", Action.MIGRATE),
        XidRule(140, "unrecovered ECC error", Action.MIGRATE),
    )
}

# Health signals that are not Xids (NVML's other counters), same vocabulary.
KIND_ACTIONS: dict[str, tuple[str, Action]] = {
    "ecc_dbe": ("double-bit ECC errors counted", Action.MIGRATE),
    "remapped_rows_pending": ("row remapping pending a GPU reset", Action.MIGRATE_DEFERRED),
    "remapped_rows_failed": ("row remapping failed", Action.MIGRATE),
    "gpu_lost": ("GPU lost (NVML cannot reach it)", Action.DRAIN_HOST),
}


def rule_for(xid: int) -> XidRule:
    """The catalogue's rule; an Xid we do not know is reported, not acted on:
    moving tenants on a guess would interrupt them for nothing."""
    return XID_RULES.get(xid) or XidRule(xid, "unknown Xid", Action.NOTIFY)
