"""Nodes in the same state are interchangeable: score one of each.

Two nodes of the same build (model, GPU count, CPU, memory) with the same free
CPU, free memory and multiset of per-GPU free milli score alike under any
policy that looks only at those (the house policy does), so a request need be
scored on one node per state: the one the tie rule prefers. A fleet that packs
has few distinct states among the nodes that fit a request (most are either
untouched or too full for it), so this turns O(nodes) scoring into
O(distinct states) without changing a single decision.

States are interned to small integers, refreshed only for nodes whose snapshot
stamp moved; the table of names is rebuilt when it grows well past the fleet,
so a long-running server does not keep every state it ever saw.
"""

from __future__ import annotations

import numpy as np

from gpudock.scheduler.snapshot import IntArray, Snapshot

StateKey = tuple[int, ...]


class NodeStates:
    def __init__(self, snapshot: Snapshot) -> None:
        self._snap = snapshot
        builds: dict[tuple[str, int, int, int], int] = {}
        self._build = [
            builds.setdefault((s.model, s.gpus, s.cpu_milli, s.memory_mib), len(builds))
            for s in snapshot.specs
        ]
        self.ids: IntArray = np.zeros(snapshot.size, np.int64)
        self.capacity = 8 * snapshot.size + 64  # ids stay below this
        self.generation = 0  # bumped when ids are given out afresh
        self._names: dict[StateKey, int] = {}
        self._clock = -1
        self.refresh()

    def refresh(self) -> None:
        """Re-key the nodes changed since the last call."""
        snap = self._snap
        if self._clock < 0 or len(self._names) + snap.size > self.capacity:
            self._names.clear()
            self.generation += 1
            changed = np.arange(snap.size)
        else:
            changed = snap.changed_since(self._clock)
        cpu, mem, free = snap.cpu_free, snap.mem_free, snap.gpu_free
        for n in changed.tolist():
            key = (self._build[n], int(cpu[n]), int(mem[n]), *sorted(free[n].tolist()))
            self.ids[n] = self._names.setdefault(key, len(self._names))
        self._clock = snap.clock

    def representatives(self, nodes: IntArray, rank: IntArray) -> IntArray:
        """Of `nodes` (ascending), the lowest-`rank` node of each distinct state
        (as of the last `refresh`)."""
        if len(nodes) <= 1:
            return nodes
        key = self.ids[nodes] * (int(rank.max()) + 1) + rank[nodes]
        order = np.argsort(key)
        ids = self.ids[nodes][order]
        first = np.empty(len(ids), bool)
        first[0] = True
        np.not_equal(ids[1:], ids[:-1], out=first[1:])
        return np.sort(nodes[order[first]])

    def counts(self) -> tuple[IntArray, IntArray]:
        """One node of each distinct state in the whole fleet, and how many share it."""
        self.refresh()
        _, first, count = np.unique(self.ids, return_index=True, return_counts=True)
        return first.astype(np.int64), count.astype(np.int64)
