"""fgd-eval/1: the JSON-lines protocol of the reference evaluator
(`shared/data/fgd_eval.py`, whose docstring is its specification), served by
the same placement core the server uses.

The evaluator owns the cluster state and sends every node that changed since
the previous pod; we mirror it into a snapshot and never allocate ourselves,
so our state cannot drift from its state. Streams are passed in: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from gpudock.scheduler.choosing import Policy
from gpudock.scheduler.demand import Demand
from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.snapshot import NodeSpec, Snapshot
from gpudock.scheduler.trace import pod_demand

PROTOCOL = "fgd-eval/1"


class ProtocolError(ValueError):
    """A message that is not fgd-eval/1."""


def serve(lines: Iterable[str], send: Callable[[str], None], policy_name: str) -> None:
    """Answer each message of `lines` through `send` until "end" or the input ends."""
    session: _Session | None = None
    for line in lines:
        if not line.strip():
            continue
        message = json.loads(line)
        kind = message.get("type")
        if kind == "init":
            session = _Session(message, policy_name)
            send('{"ok":true}')
        elif kind == "pod":
            if session is None:
                raise ProtocolError("a pod message before init")
            send(json.dumps(session.answer(message), separators=(",", ":")))
        elif kind == "end":
            return
        else:
            raise ProtocolError(f"unknown message type {kind!r}")


class _Session:
    def __init__(self, init: dict[str, Any], policy_name: str) -> None:
        if init.get("protocol") != PROTOCOL:
            raise ProtocolError(f"protocol {init.get('protocol')!r} is not {PROTOCOL}")
        nodes = sorted(init["nodes"], key=lambda n: n["id"])
        self.snapshot = Snapshot(
            [
                NodeSpec(n["name"], n["model"], n["num_gpu"], n["cpu_milli"], n["memory_mib"])
                for n in nodes
            ]
        )
        ranks = [n.get("tie_rank") for n in nodes]
        tie_rank = np.array(ranks, np.int64) if all(r is not None for r in ranks) else None
        workload = [(_class_demand(d), float(d["weight"])) for d in init["workload_distribution"]]
        context = PolicyContext(int(init.get("seed", 0)), tie_rank, workload or None)
        self.policy: Policy = make_policy(policy_name, self.snapshot, context)

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        for update in message.get("updates", []):
            self.snapshot.set_free(
                update["id"], update["cpu_free"], update["mem_free"], update["gpu_free"]
            )
        demand = pod_demand(message["pod"])
        self.policy.observe(demand)
        choice = self.policy.choose(demand)
        if choice is None:
            return {"node": None}
        return {"node": choice.node, "gpus": list(choice.gpus)}


def _class_demand(entry: dict[str, Any]) -> Demand:
    return pod_demand({**entry, "cpu_milli": entry["cpu_milli"] or 0})
