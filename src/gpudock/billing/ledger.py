"""The double-entry ledger, in memory: the rules the database tables follow.

Every posting moves a positive amount of micro-units from one account (its
*debit* side) to another (its *credit* side); postings are only ever added.
An account's balance is Σ credits − Σ debits over all postings that touch it.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

EXTERNAL_TOPUPS = "external:topups"
REVENUE_COMPUTE = "revenue:compute"
REVENUE_STORAGE = "revenue:storage"
SYSTEM_ACCOUNTS = (EXTERNAL_TOPUPS, REVENUE_COMPUTE, REVENUE_STORAGE)


def user_account(user_id: str) -> str:
    return f"user:{user_id}"


class PostingKind(enum.StrEnum):
    TOPUP = "topup"  # external:topups → user:<id>
    COMPUTE = "compute"  # user:<id> → revenue:compute (running seconds)
    STORAGE = "storage"  # user:<id> → revenue:storage (stopped disk seconds)
    REFUND = "refund"  # revenue:<…> → user:<id> (seconds charged ahead of a stop)


class DuplicateKeyConflict(ValueError):
    """The idempotency key was used before, for a different posting."""


@dataclass(frozen=True)
class Posting:
    key: str
    kind: PostingKind
    debit: str
    credit: str
    amount: int
    user_id: str
    at: datetime
    instance_id: str | None = None
    interval_id: str | None = None
    seconds: int = 0

    def __post_init__(self) -> None:
        if self.amount <= 0:
            raise ValueError(f"a posting moves a positive amount, not {self.amount}")
        if self.debit == self.credit:
            raise ValueError("a posting moves money between two different accounts")


class Ledger:
    """Append-only postings with unique idempotency keys; balances derived."""

    def __init__(self) -> None:
        self._postings: dict[str, Posting] = {}
        self._debited: defaultdict[str, int] = defaultdict(int)
        self._credited: defaultdict[str, int] = defaultdict(int)

    def post(self, posting: Posting) -> bool:
        """Add the posting; False (and nothing changes) if its key was seen.

        Replaying a key with different contents is a bug in the caller and raises.
        """
        seen = self._postings.get(posting.key)
        if seen is not None:
            if seen != posting:
                raise DuplicateKeyConflict(f"key {posting.key!r} already names another posting")
            return False
        self._postings[posting.key] = posting
        self._debited[posting.debit] += posting.amount
        self._credited[posting.credit] += posting.amount
        return True

    def balance(self, account: str) -> int:
        return self._credited.get(account, 0) - self._debited.get(account, 0)

    def postings(self) -> list[Posting]:
        return list(self._postings.values())

    def get(self, key: str) -> Posting | None:
        return self._postings.get(key)

    def accounts(self) -> dict[str, int]:
        names = set(self._debited) | set(self._credited)
        return {name: self.balance(name) for name in sorted(names)}

    def totals(self) -> tuple[int, int]:
        """(Σ debits, Σ credits), each tallied on its own side of every account."""
        return sum(self._debited.values()), sum(self._credited.values())
