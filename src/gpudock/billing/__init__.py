"""gpudock.billing: the pure core of billing — money, the ledger, metering.

No I/O here (import-linter forbids sqlalchemy, docker, httpx and the other
layers); `gpudock.services` persists what these modules decide.

Money
    Integer micro-units (1 currency unit = 1,000,000 µ) end to end. Decimal
    strings in and out (`money.parse_amount`, `money.format_amount`), never floats.

Accounts (`ledger`)
    `user:<id>`          a user's prepaid wallet: what they can spend
    `revenue:compute`    what running instances earned
    `revenue:storage`    what stopped instances' disks earned
    `external:topups`    the outside world; goes negative by what came in

Postings
    A posting moves a positive amount from its debit account to its credit
    account and is never changed or removed. Top-up: external → user. Compute
    or storage charge: user → revenue. Refund (seconds charged ahead of a stop
    that came earlier): revenue → user. Each has a unique idempotency key.

Invariants (checked by tests/billing, property-based)
    1. Σ debits = Σ credits; the balances of all accounts sum to zero.
    2. No key is posted twice; a replay, duplicate delivery or stale charge
       computed before a crash changes nothing.
    3. Billed seconds = running seconds, exactly, per interval: charges tile
       [0, duration) with no gap and no overlap (`metering`), and their amounts
       add up to `duration × rate // per`, whatever the pieces.
    4. With the charging pass running at least once per charging period, a
       wallet ends no period below zero by more than one period's cost
       (`metering.protection` stops instances before that).
    5. Balances are derived: the database's cached balance per account equals
       the sum of its postings (`services.ledger.verify_balances`).
"""
