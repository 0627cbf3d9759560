"""Policies by name: what `--policy NAME` and the server's setting choose from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpudock.scheduler.baselines import BestFitPolicy, FirstFitPolicy, RandomPolicy
from gpudock.scheduler.choosing import Policy, TieRule
from gpudock.scheduler.demand import Demand
from gpudock.scheduler.fgd import FgdPolicy
from gpudock.scheduler.house import HousePolicy
from gpudock.scheduler.names import DEFAULT_POLICY, POLICY_NAMES, unknown_policy
from gpudock.scheduler.snapshot import IntArray, Snapshot
from gpudock.scheduler.workload import WorkloadEstimate

__all__ = ["DEFAULT_POLICY", "POLICY_NAMES", "PolicyContext", "make_policy"]


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may be built with. `tie_rank` is the fixed node order the
    baselines break ties by (None: random ties); `workload` is a target workload
    given in advance, which FGD as published uses (None: FGD learns it online);
    `learned` is the house policy's online estimate to carry on with (the
    server keeps it when it rebuilds the policy over a changed fleet)."""

    seed: int = 0
    tie_rank: IntArray | None = None
    workload: Sequence[tuple[Demand, float]] | None = None
    learned: WorkloadEstimate | None = None


def _ties(snapshot: Snapshot, name: str, context: PolicyContext) -> TieRule:
    # Seeded per policy name, as the reference evaluator seeds its generators.
    return TieRule(context.tie_rank, np.random.default_rng([context.seed, sum(map(ord, name))]))


_FACTORIES: dict[str, Callable[[Snapshot, PolicyContext], Policy]] = {
    "gpudock": lambda s, c: HousePolicy(s, c.seed, workload=c.learned),
    "gpudock-place": lambda s, c: HousePolicy(s, c.seed, workload=c.learned, admission=False),
    "fgd": lambda s, c: FgdPolicy(s, _ties(s, "fgd", c), c.workload),
    "firstfit": lambda s, c: FirstFitPolicy(s, _ties(s, "firstfit", c)),
    "bestfit": lambda s, c: BestFitPolicy(s, _ties(s, "bestfit", c)),
    "random": lambda s, c: RandomPolicy(s, _ties(s, "random", c)),
}


def make_policy(name: str, snapshot: Snapshot, context: PolicyContext | None = None) -> Policy:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(unknown_policy(name)) from None
    return factory(snapshot, context or PolicyContext())
