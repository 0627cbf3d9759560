"""The operator page's figures: utilisation per GPU model and host over a window."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from gpudock.db.models import InstanceModel, UserModel
from gpudock.db.models.metrics import MINUTE, RAW
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics.fleet import ModelUtilisation, utilisation_by_model_and_host
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples
from tests.support.platforms import PlatformFactory


class Fleet:
    """The simulated fleet with one user, "sam"; samples are dated from `now`."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.owner: UserModel = users.create_user(platform.ctx, "sam").user
        self.now = platform.ctx.clock()

    def run(self, name: str, count: int, share: str | None = None) -> InstanceModel:
        request = InstanceRequest(
            gpu_model="A100-80GB",
            gpu_count=count,
            name=name,
            gpu_share=None if share is None else Decimal(share),
        )
        actions.create_instance(self.platform.ctx, self.owner, request)
        self.platform.reconciler.drain()
        return actions.get_instance(self.platform.ctx, self.owner, name)

    def record(self, *samples: Sample) -> None:
        with self.platform.ctx.sessions.begin() as session:
            record_samples(session, list(samples))

    def sample(
        self,
        instance: InstanceModel,
        minutes_ago: int,
        *gpus: float,
        resolution_s: int = RAW,
        samples: int = 1,
    ) -> Sample:
        return Sample(
            instance_id=instance.id,
            at=self.now - timedelta(minutes=minutes_ago),
            cpu_percent=None,
            memory_bytes=0,
            gpus=tuple(GpuFigure(u, 0.0) for u in gpus),
            resolution_s=resolution_s,
            samples=samples,
        )

    def utilisation(self, window: timedelta) -> dict[str, ModelUtilisation]:
        """By model: the simulated fleet has one host of each."""
        return {r.model: r for r in utilisation_by_model_and_host(self.platform.ctx, window)}


@pytest.fixture
def fleet(platform_factory: PlatformFactory) -> Fleet:
    return Fleet(platform_factory())


def test_every_gpu_counts_weighted_by_samples_and_a_share_by_its_fraction(fleet: Fleet) -> None:
    pair = fleet.run("pair", 2)
    half = fleet.run("half", 1, share="0.5")
    fleet.record(
        fleet.sample(pair, 1, 100.0, 0.0),  # the busiest GPU alone would say 100
        fleet.sample(pair, 30, 20.0, 20.0, resolution_s=MINUTE, samples=6),
        fleet.sample(pair, 120, 100.0, 100.0),  # before the window
        fleet.sample(half, 2, 40.0),  # 40 % of the card: its half is 80 % busy
    )
    rows = fleet.utilisation(timedelta(hours=1))
    a100, rtx = rows["A100-80GB"], rows["RTX4090-24GB"]
    # (50 × 2 GPUs × 1 sample + 20 × 2 × 6 + 40 × 1) / (2 × 1 + 2 × 6 + 0.5 × 1)
    assert a100.mean_utilisation_percent == pytest.approx(380 / 14.5)
    assert (a100.gpus, a100.used) == (4, 3)
    assert (rtx.gpus, rtx.used, rtx.mean_utilisation_percent) == (2, 0, None)


def test_no_samples_in_the_window_is_none_not_zero(fleet: Fleet) -> None:
    pair = fleet.run("pair", 2)
    fleet.record(fleet.sample(pair, 90, 100.0, 100.0))
    assert fleet.utilisation(timedelta(hours=1))["A100-80GB"].mean_utilisation_percent is None
    assert fleet.utilisation(timedelta(days=1))["A100-80GB"].mean_utilisation_percent == 100.0
