"""The policies' names, apart from their code: settings validate
`GPUDOCK_PLACEMENT_POLICY` against them without importing numpy."""

from __future__ import annotations

DEFAULT_POLICY = "gpudock"
POLICY_NAMES = ("gpudock", "gpudock-place", "fgd", "firstfit", "bestfit", "random")


def unknown_policy(name: str) -> str:
    """The message for a name that is not one of ours."""
    return f"unknown placement policy {name!r}; choose from {', '.join(POLICY_NAMES)}"
