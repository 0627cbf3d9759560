"""The monitoring passes: sample every running instance each
`GPUDOCK_METRICS_INTERVAL_S`, and keep the samples table bounded.

They run on a thread of their own (`gpudock-metrics`), beside placement and
charging: a round reads every running container from the engine, which at a
few hundred instances takes longer than a placement tick may wait.
"""

from __future__ import annotations

import logging

from gpudock.services.context import ServiceContext
from gpudock.services.metrics.downsampling import Downsampled, downsample, retention_of
from gpudock.services.metrics.sampling import SamplerState, sample_running

log = logging.getLogger(__name__)
DOWNSAMPLE_INTERVAL_S = 300.0


def sample_pass(ctx: ServiceContext, state: SamplerState) -> int:
    """One round of samples; returns how many instances were sampled."""
    return len(sample_running(ctx, state))


def downsample_pass(ctx: ServiceContext) -> Downsampled:
    done = downsample(ctx, ctx.clock(), retention_of(ctx))
    if done.rolled_up or done.expired:
        log.info(
            "samples: %d rows rolled into %d averages, %d expired",
            done.rolled_up,
            done.written,
            done.expired,
        )
    return done
