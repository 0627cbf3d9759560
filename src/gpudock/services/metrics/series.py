"""What a user asks of their own instances' samples: one instance's curves
since a while ago, and the latest sample of each of their running instances."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpudock.db.models import UserModel
from gpudock.errors import InvalidRequest
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.metrics.fleet import (
    FRESH_INTERVALS,
    InstanceFigures,
    running_instance_figures,
)
from gpudock.services.metrics.queries import samples_since
from gpudock.services.metrics.store import Sample
from gpudock.syntax import DURATION_PATTERN

_DURATION = re.compile(DURATION_PATTERN)
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class InstanceSeries:
    instance_id: str
    name: str
    since: datetime
    samples: list[Sample]


def since_of(now: datetime, text: str) -> datetime:
    """'1h' → an hour before `now`; `InvalidRequest` naming the forms it takes."""
    if not _DURATION.fullmatch(text):
        raise InvalidRequest(
            f"bad duration {text[:32]!r}: use a number and a unit, m, h, d or w (e.g. 1h, 7d)",
            field="since",
        )
    return now - timedelta(**{_UNITS[text[-1]]: int(text[:-1])})


def instance_series(ctx: ServiceContext, user: UserModel, ref: str, since: str) -> InstanceSeries:
    """The instance's samples since `since` ago, oldest first. `NotFound` for
    another tenant's instance."""
    instance = instances.get_instance(ctx, user, ref)
    start = since_of(ctx.clock(), since)
    with ctx.reader() as session:
        samples = samples_since(session, instance.id, start)
    return InstanceSeries(instance.id, instance.name, start, samples)


def latest_of_user(ctx: ServiceContext, user: UserModel) -> list[InstanceFigures]:
    """The user's running instances with a recent sample, by name."""
    fresh = ctx.clock() - timedelta(seconds=FRESH_INTERVALS * ctx.settings.metrics_interval_s)
    with ctx.reader() as session:
        return running_instance_figures(session, fresh, user.id)
