"""A platform on the fake runtime whose clock (and the runtime's) the test moves."""

from __future__ import annotations

from collections.abc import Callable

from gpudock.billing.money import parse_amount
from gpudock.db.models import UserModel
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
