"""The operator's view of the money (admins only): every wallet's balance and
the latest top-ups, so that a top-up is made knowing who has what, and checked
after."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from gpudock.billing.ledger import PostingKind
from gpudock.db.models import BillingAccountModel, BillingPostingModel, UserModel, UserState
from gpudock.errors import Forbidden
from gpudock.services.context import ServiceContext

TOPUPS_SHOWN = 20


@dataclass(frozen=True)
class Wallet:
    user_name: str
    balance: int  # micro-units; 0 for a user never topped up


@dataclass(frozen=True)
class Topup:
    posting: BillingPostingModel
    user_name: str


def _require_admin(actor: UserModel) -> None:
    if not actor.is_admin:
        raise Forbidden("only an admin can see every wallet")


def wallets(ctx: ServiceContext, actor: UserModel) -> list[Wallet]:
    """Every user but the deleted, by name, with the balance on their account."""
    _require_admin(actor)
    with ctx.reader() as session:
        rows = session.execute(
            select(UserModel.name, BillingAccountModel.balance_micro)
            .outerjoin(BillingAccountModel, BillingAccountModel.user_id == UserModel.id)
            .where(UserModel.state != UserState.DELETED)
            .order_by(UserModel.name)
        ).all()
    return [Wallet(name, balance or 0) for name, balance in rows]


def recent_topups(ctx: ServiceContext, actor: UserModel, limit: int = TOPUPS_SHOWN) -> list[Topup]:
    """The latest top-ups of anyone's wallet, newest first."""
    _require_admin(actor)
    with ctx.reader() as session:
        rows = session.execute(
            select(BillingPostingModel, UserModel.name)
            .join(UserModel, UserModel.id == BillingPostingModel.user_id)
            .where(BillingPostingModel.kind == PostingKind.TOPUP.value)
            .order_by(BillingPostingModel.at.desc(), BillingPostingModel.id.desc())
            .limit(limit)
        ).all()
    return [Topup(posting, name) for posting, name in rows]
