"""Billing API bodies. Money goes in and out as decimal strings of currency
units (`"3.6"`); `*_micro` fields carry the exact integer micro-units too."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from gpudock.syntax import (
    AMOUNT_OR_ZERO_PATTERN,
    AMOUNT_PATTERN,
    MAX_AMOUNT_TEXT,
    MAX_UNITS,
)


def _no_floats(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(
            'give amounts as decimal strings such as "3.6" (JSON numbers with a fraction '
            "pass through binary floating point and are refused)"
        )
    return value


def _amount_schema(minimum: int) -> dict[str, Any]:
    """Exactly what `billing.money.parse_amount` takes (zero only where `minimum` is 0)."""
    pattern = AMOUNT_PATTERN if minimum else AMOUNT_OR_ZERO_PATTERN
    return {
        "anyOf": [
            {"type": "string", "pattern": pattern, "maxLength": MAX_AMOUNT_TEXT},
            {"type": "integer", "minimum": minimum, "maximum": MAX_UNITS},
        ],
        "description": 'Currency units as a decimal string, e.g. "3.6"',
        "examples": ["3.6"],
    }


Amount = Annotated[str | int, BeforeValidator(_no_floats), WithJsonSchema(_amount_schema(1))]
AmountOrZero = Annotated[str | int, BeforeValidator(_no_floats), WithJsonSchema(_amount_schema(0))]


class PriceSetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["gpu", "no_gpu", "disk"] = Field(
        default="gpu",
        description="gpu: per GPU-hour of gpu_model; no_gpu: per hour of a no-GPU "
        "instance; disk: per GB-day of a stopped instance's disk",
    )
    gpu_model: str | None = Field(default=None, max_length=64, examples=["A100-80GB"])
    amount: AmountOrZero


class PricePublic(BaseModel):
    kind: str
    gpu_model: str | None
    amount: str
    amount_micro: int
    unit: str
    currency: str
    updated_at: datetime


class PricesPublic(BaseModel):
    currency: str
    prices: list[PricePublic]


class TopupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    user: str = Field(min_length=1, max_length=64, description="User name or id")
    amount: Amount
    note: str = Field(default="", max_length=200)


class TopupPublic(BaseModel):
    id: int
    key: str
    user_id: str
    user_name: str
    amount: str
    amount_micro: int
    balance: str
    balance_micro: int
    currency: str
    at: datetime
    replayed: bool = Field(description="True when an Idempotency-Key replay returned the first")


class BudgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    monthly: AmountOrZero | None = Field(
        description='Monthly budget; "0" allows no paid use this month; null removes it'
    )


class BalancePublic(BaseModel):
    user_id: str
    user_name: str
    currency: str
    balance: str = Field(description="Posted: Σ credits − Σ debits of the wallet")
    balance_micro: int
    unposted: str = Field(description="Accrued by open intervals, not posted yet")
    available: str = Field(description="balance − unposted")
    available_micro: int
    burn_per_hour: str
    runway_seconds: int | None = Field(description="How long `available` lasts at the burn")
    monthly_budget: str | None
    month_spent: str


class LedgerLinePublic(BaseModel):
    id: int
    at: datetime
    kind: str
    amount: str = Field(description="Signed for the user: top-ups and refunds +, charges −")
    amount_micro: int
    currency: str
    instance_id: str | None
    instance_name: str | None
    gpu_model: str | None
    gpu_count: int
    # Read back under the names they are written with, so that clients parse the answer.
    from_at: datetime | None = Field(
        serialization_alias="from", validation_alias=AliasChoices("from_at", "from")
    )
    to_at: datetime | None = Field(
        serialization_alias="to", validation_alias=AliasChoices("to_at", "to")
    )
    seconds: int
    rate: str | None
    rate_unit: str | None
    description: str


class LedgerPagePublic(BaseModel):
    currency: str
    lines: list[LedgerLinePublic]
    next_cursor: int | None = Field(description="Pass as `cursor` for the next page")


class UsagePublic(BaseModel):
    instance_id: str
    instance_name: str | None
    gpu_model: str | None
    gpu_count: int
    seconds: int
    gpu_seconds: int
    compute_amount: str
    storage_seconds: int
    storage_amount: str
    amount: str


class UsageReportPublic(BaseModel):
    currency: str
    instances: list[UsagePublic]
    total: str
