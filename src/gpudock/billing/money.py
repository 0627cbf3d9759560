"""Money as integer micro-units (1 currency unit = 1,000,000 µ), never floats.

The API and the CLI speak decimal strings (`"3.6"` = 3.6 CNY); these two
functions are the only places that convert, exactly, through `decimal.Decimal`.
What an amount's text may look like (its pattern, length and largest value) is
in `gpudock.syntax`, which the API's schemas publish.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from gpudock.errors import InvalidRequest
from gpudock.syntax import MAX_AMOUNT_TEXT, MAX_UNITS

MICROS_PER_UNIT = 1_000_000
DECIMALS = 6
MAX_MICROS = MAX_UNITS * MICROS_PER_UNIT  # fits a signed 64-bit column 9000 times over
# ASCII digits only (`\d` would take "٣"), around them any whitespace `strip` removes
DECIMAL_PATTERN = r"^\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*$"
_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z")
_STEP = Decimal(1).scaleb(-DECIMALS)


def parse_amount(
    value: str | int,
    *,
    field: str = "amount",
    allow_zero: bool = False,
) -> int:
    """A decimal string (or an exact integer) of currency units → micro-units.

    Refuses, with a message a user can act on: non-numbers (`"abc"`, `"1e3"`,
    `"NaN"`), negatives, zero unless `allow_zero`, more than 6 decimal places
    that are not zeros (`"0.0000001"`), and more than one billion units.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidRequest(f'{field} must be a decimal string such as "3.6"', field=field)
    raw = str(value)
    text = raw.strip()
    if len(raw) > MAX_AMOUNT_TEXT or not _DECIMAL.match(text):
        raise InvalidRequest(
            f'{field} {_shown(text)} is not a decimal number: write it like "3.6" or "100" '
            "(digits, at most one '.', no exponent)",
            field=field,
        )
    try:
        amount = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern already refuses these
        raise InvalidRequest(f"{field} {_shown(text)} is not a number", field=field) from exc
    if amount < 0 or text.startswith("-"):
        raise InvalidRequest(f"{field} must not be negative (got {text})", field=field)
    if amount == 0 and not allow_zero:
        raise InvalidRequest(f"{field} must be more than zero", field=field)
    if amount > MAX_UNITS:
        raise InvalidRequest(
            f"{field} {text} is too large: at most {MAX_UNITS:,} per operation", field=field
        )
    if amount != amount.quantize(_STEP):
        raise InvalidRequest(
            f"{field} {text} has more than {DECIMALS} decimal places: amounts are kept "
            f'exactly in millionths (e.g. "0.000001")',
            field=field,
        )
    return int(amount.scaleb(DECIMALS))


def format_amount(micros: int) -> str:
    """Micro-units → the shortest exact decimal string: 3_600_000 → "3.6", -1 → "-0.000001"."""
    sign = "-" if micros < 0 else ""
    units, fraction = divmod(abs(micros), MICROS_PER_UNIT)
    digits = f"{fraction:06d}".rstrip("0")
    return f"{sign}{units}" + (f".{digits}" if digits else "")


def format_cents(micros: int) -> str:
    """Micro-units → what a person reads: two decimals, half up (99_958_334 → "99.96");
    an amount that is not zero but rounds to it says so ("<0.01", "-<0.01")."""
    sign = "-" if micros < 0 else ""
    cents, remainder = divmod(abs(micros), MICROS_PER_UNIT // 100)
    if remainder * 2 >= MICROS_PER_UNIT // 100:
        cents += 1
    if cents == 0 and micros != 0:
        return f"{sign}<0.01"
    units, fraction = divmod(cents, 100)
    return f"{sign if cents else ''}{units}.{fraction:02d}"


def _shown(text: str) -> str:
    return repr(text if len(text) <= MAX_AMOUNT_TEXT else text[:MAX_AMOUNT_TEXT] + "…")
