"""A month's spending at month-end scale: summed over the postings (the baseline,
what `balances.month_spent` did before migration 0023) against the monthly totals
that `post_many` keeps, on the same SQLite database in the same run.

    nice .venv/bin/python -m bench.month_spent [--postings 345600] [--reads 5]

One user with `--postings` charges in this month (345,600: eight instances charged
every minute for 30 days), written as one executemany, the totals filled by the
same statement migration 0023 runs. Prints the median of `--reads` reads of each
and their ratio; both must give the same figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from gpudock.billing.ledger import PostingKind, user_account
from gpudock.db.models import BillingPostingModel
from gpudock.platform import open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.billing import balances
from gpudock.services.billing import postings as ledger
from gpudock.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postings", type=int, default=345_600)
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpudock-month-") as tmp:
        settings = Settings(data_dir=Path(tmp), simulate="1x8xA100-80GB", runtime="fake")
        platform = open_platform(settings, runtime=FakeRuntime())
        try:
            ctx = platform.ctx
            user_id = users.create_user(ctx, "bob").user.id
            now = ctx.clock().replace(day=28)
            with ctx.sessions.begin() as session:
                _post_a_month(session, user_id, now, args.postings)
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)

            def summed(session: Session) -> int:
                rows = session.execute(
                    select(BillingPostingModel.kind, func.sum(BillingPostingModel.amount_micro))
                    .where(
                        BillingPostingModel.user_id == user_id,
                        BillingPostingModel.at >= start,
                        BillingPostingModel.kind != PostingKind.TOPUP.value,
                    )
                    .group_by(BillingPostingModel.kind)
                ).all()
                return sum(int(total) for _kind, total in rows)

            def kept(session: Session) -> int:
                return balances.month_spent(session, user_id, now)

            baseline = _median_read(ctx.reader, summed, args.reads)
            totals = _median_read(ctx.reader, kept, args.reads)
        finally:
            platform.close()
    if baseline[1] != totals[1]:
        print(f"the figures differ: {baseline[1]} summed, {totals[1]} kept")
        return 1
    print(f"{args.postings} postings this month, median of {args.reads} reads (SQLite):")
    print(f"  summed over the postings (baseline) {1000 * baseline[0]:8.2f} ms")
    print(f"  the monthly totals                  {1000 * totals[0]:8.2f} ms")
    print(f"  ratio {totals[0] / baseline[0]:.4f} x; both {totals[1]} micro-units")
    return 0


def _post_a_month(session: Session, user_id: str, now: datetime, count: int) -> None:
    account = user_account(user_id)
    ledger.ensure_account(session, account, now)
    rows = [
        {
            "key": f"bench-{n}",
            "kind": PostingKind.COMPUTE.value,
            "debit_account": account,
            "credit_account": account,
            "amount_micro": 1000,
            "user_id": user_id,
            "at": now - timedelta(seconds=(n * 7) % (27 * 86_400)),
            "recorded_at": now,
            "description": "",
        }
        for n in range(count)
    ]
    session.execute(insert(BillingPostingModel), rows)
    session.execute(  # what migration 0023 runs, on SQLite
        text(
            "INSERT INTO billing_month_totals (user_id, month, kind, amount_micro) "
            "SELECT user_id, substr(at, 1, 7), kind, SUM(amount_micro) FROM billing_postings "
            "GROUP BY user_id, substr(at, 1, 7), kind"
        )
    )


def _median_read(
    reader: Callable[[], AbstractContextManager[Session]],
    read: Callable[[Session], int],
    times: int,
) -> tuple[float, int]:
    spent: list[float] = []
    figure = 0
    for _ in range(times):
        with reader() as session:
            began = time.perf_counter()
            figure = read(session)
            spent.append(time.perf_counter() - began)
    return statistics.median(spent), figure


if __name__ == "__main__":
    sys.exit(main())
