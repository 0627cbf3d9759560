"""OpenAPI links: which later requests take an id from a response.

Clients and generators (Schemathesis' stateful phase) follow them: create an
instance, then read, stop, start and delete that instance.
"""

from __future__ import annotations

from typing import Any

API_PREFIX = "/api/v1"


def _operation_ref(method: str, path: str) -> str:
    pointer = (API_PREFIX + path).replace("~", "~0").replace("/", "~1")
    return f"#/paths/{pointer}/{method.lower()}"


def links(
    status: int, parameter: str, field: str, targets: dict[str, tuple[str, str]]
) -> dict[int | str, dict[str, Any]]:
    """`responses` entry: the `field` of a `status` response fills `parameter` of
    each target, given as name → (method, path under /api/v1)."""
    return {
        status: {
            "links": {
                name: {
                    "operationRef": _operation_ref(method, path),
                    "parameters": {parameter: f"$response.body#/{field}"},
                }
                for name, (method, path) in targets.items()
            }
        }
    }
