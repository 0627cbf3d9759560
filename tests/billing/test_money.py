"""Money: decimal strings in, integer micro-units inside, exact both ways."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.billing.money import MAX_MICROS, format_amount, format_cents, parse_amount
from gpudock.errors import InvalidRequest
from gpudock.syntax import AMOUNT_OR_ZERO_PATTERN, AMOUNT_PATTERN


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("3.6", 3_600_000),
        ("100", 100_000_000),
        ("0.000001", 1),
        (" 12.50 ", 12_500_000),
        (".5", 500_000),
        ("7.", 7_000_000),
        ("1.5000000", 1_500_000),  # trailing zeros beyond 6 places are still exact
        ("1000000000", MAX_MICROS),
        (42, 42_000_000),
        ("0.1", 100_000),  # 0.1 is not exact in binary floating point; here it is
    ],
)
def test_parse_is_exact(text: str | int, micros: int) -> None:
    assert parse_amount(text) == micros


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("-1", "must not be negative"),
        ("0", "more than zero"),
        ("0.000", "more than zero"),
        ("0.0000001", "more than 6 decimal places"),
        ("1.1234567", "more than 6 decimal places"),
        ("1000000000.000001", "too large"),
        ("1" * 41, "not a decimal number"),
        ("abc", "not a decimal number"),
        ("1e3", "not a decimal number"),
        ("NaN", "not a decimal number"),
        ("Infinity", "not a decimal number"),
        ("1,5", "not a decimal number"),
        ("", "not a decimal number"),
        ("--1", "not a decimal number"),
        (True, "decimal string"),
        (3.6, "decimal string"),
    ],
)
def test_bad_amounts_are_refused_clearly(value: object, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_amount(value, field="amount")  # type: ignore[arg-type]
    assert says in caught.value.message
    assert caught.value.field == "amount"


def test_zero_where_allowed() -> None:
    assert parse_amount("0", allow_zero=True) == 0


@pytest.mark.parametrize(
    ("micros", "text"),
    [(3_600_000, "3.6"), (0, "0"), (1, "0.000001"), (-1_500_000, "-1.5"), (10**15, "1000000000")],
)
def test_format_is_the_shortest_exact_decimal(micros: int, text: str) -> None:
    assert format_amount(micros) == text


@given(st.integers(min_value=1, max_value=MAX_MICROS))
def test_format_then_parse_round_trips(micros: int) -> None:
    assert parse_amount(format_amount(micros)) == micros


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="0123456789.+- \t", min_size=1, max_size=14), st.booleans())
def test_the_schema_pattern_says_exactly_what_parse_amount_accepts(
    text: str, allow_zero: bool
) -> None:
    pattern = AMOUNT_OR_ZERO_PATTERN if allow_zero else AMOUNT_PATTERN
    try:
        parse_amount(text, allow_zero=allow_zero)
        accepted = True
    except InvalidRequest:
        accepted = False
    assert bool(re.match(pattern, text)) == accepted, text


@pytest.mark.parametrize(
    ("micros", "shown"),
    [
        (99_958_334, "99.96"),
        (3_600_000, "3.60"),
        (0, "0.00"),
        (5_000, "0.01"),  # half a cent rounds up
        (4_999, "<0.01"),  # not zero, though it rounds to it
        (1, "<0.01"),
        (-1, "-<0.01"),
        (-2_505_000, "-2.51"),
        (-4_000, "-<0.01"),
        (1_000_000_000 * 1_000_000, "1000000000.00"),
    ],
)
def test_amounts_for_people_have_two_decimals(micros: int, shown: str) -> None:
    assert format_cents(micros) == shown


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_two_decimals_are_never_more_than_half_a_cent_off(micros: int) -> None:
    shown = format_cents(micros)
    if "<" in shown:
        assert 0 < abs(micros) < 5_000
    else:
        assert abs(Decimal(shown) * 1_000_000 - micros) <= 5_000
