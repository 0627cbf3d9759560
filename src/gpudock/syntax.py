"""The syntax of values the API takes as text, defined once.

Two sides use each definition: the API's schemas publish it (as OpenAPI patterns
and limits) and the code that parses the value enforces it (with messages in
words rather than a regular expression). It lives here, importing nothing but
the standard library, so that the schemas stay importable without the services
or the billing core: the CLI parses every answer into those schemas and must
start fast.
"""

from __future__ import annotations

import re

# -- API tokens (services.accounts.tokens) --
TOKEN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # noqa: S105 (a pattern, not a secret)
# A token's lifetime: a number and a unit, minutes, hours, days or weeks ("90d").
DURATION_PATTERN = r"^[1-9][0-9]{0,4}[mhdw]$"

# -- amounts of money (billing.money.parse_amount) --
MAX_UNITS = 1_000_000_000  # one billion currency units: far above any real amount
MAX_AMOUNT_TEXT = 40
# What parse_amount accepts, exactly, as a JSON Schema pattern: no sign but '+', at
# most 9 integer digits (or exactly 1,000,000,000), at most 6 decimals that are not
# zeros; AMOUNT_PATTERN also needs a digit that is not zero.
_UNITS = r"(?:0*[0-9]{1,9}(?:\.[0-9]{0,6}0*)?|0*1000000000(?:\.0*)?|\.[0-9]{1,6}0*)"
AMOUNT_OR_ZERO_PATTERN = rf"^\s*\+?{_UNITS}\s*$"
AMOUNT_PATTERN = rf"^\s*\+?(?=[^1-9]*[1-9]){_UNITS}\s*$"

# -- host labels (services.agents.hosts; an instance's host_labels) --
LABEL_KEY_PATTERN = r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
MAX_LABELS = 16


def label_problem(key: str, value: str) -> str | None:
    """What is wrong with the label `key=value`, in words; None: nothing."""
    if not re.fullmatch(LABEL_KEY_PATTERN[1:-1], key):
        return (
            f"bad label key {key!r}: 1–63 lower-case letters, digits and '.', '_', '/', '-', "
            "starting and ending with a letter or digit (e.g. region, zone)"
        )
    if not re.fullmatch(LABEL_VALUE_PATTERN[1:-1], value):
        return (
            f"bad value {value!r} of label {key!r}: 1–63 letters, digits and '.', '_', '-', "
            "starting and ending with a letter or digit (e.g. eu-west)"
        )
    return None


def labels_problem(labels: dict[str, str]) -> str | None:
    """What is wrong with a set of labels (too many, or one of them); None: nothing."""
    if len(labels) > MAX_LABELS:
        return f"{len(labels)} labels: at most {MAX_LABELS}"
    return next((p for k, v in labels.items() if (p := label_problem(k, v))), None)
