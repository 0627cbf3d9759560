"""A platform on the fake runtime whose clock (and the runtime's) the test moves."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.billing.money import parse_amount
from gpudock.db.models import BillingIntervalModel, UserModel
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.billing import balances as billing

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"


MakePlatform = Callable[..., Platform]


def admin_of(platform: Platform) -> UserModel:
    return next(u for u in users.list_users(platform.ctx) if u.is_admin)


def new_user(platform: Platform, name: str) -> UserModel:
    return users.create_user(platform.ctx, name).user


def price(platform: Platform, model: str | None, amount: str, kind: str = "gpu") -> None:
    billing.set_price(
        platform.ctx, admin_of(platform), kind, model, parse_amount(amount, allow_zero=True)
    )


def topup(platform: Platform, user: UserModel, amount: str, key: str | None = None) -> None:
    billing.topup(platform.ctx, admin_of(platform), user.name, parse_amount(amount), key)


def compute_intervals(session: Session, instance_id: str) -> Sequence[BillingIntervalModel]:
    """The instance's compute billing intervals, oldest first."""
    return session.scalars(
        select(BillingIntervalModel)
        .where(
            BillingIntervalModel.instance_id == instance_id,
            BillingIntervalModel.kind == "compute",
        )
        .order_by(BillingIntervalModel.opened_at)
    ).all()
