"""`Status` bodies exactly as the apiserver writes them for its failures
(`k8s.io/apimachinery/pkg/api/errors`): the same reasons, codes, messages and
`details`, so a client's error handling meets what a real cluster says."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, plural: str, name: str, group: str = "") -> ApiError:
        resource = f"{plural}.{group}" if group else plural
        details = {"name": name, "kind": plural, **({"group": group} if group else {})}
        return cls(404, "NotFound", f'{resource} "{name}" not found', details)

    @classmethod
    def already_exists(cls, plural: str, name: str, group: str = "") -> ApiError:
        resource = f"{plural}.{group}" if group else plural
        details = {"name": name, "kind": plural, **({"group": group} if group else {})}
        return cls(409, "AlreadyExists", f'{resource} "{name}" already exists', details)

    @classmethod
    def conflict(cls, plural: str, name: str, why: str, group: str = "") -> ApiError:
        resource = f"{plural}.{group}" if group else plural
        details = {"name": name, "kind": plural, **({"group": group} if group else {})}
        message = f'Operation cannot be fulfilled on {resource} "{name}": {why}'
        return cls(409, "Conflict", message, details)

    @classmethod
    def invalid(cls, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
        """`causes`: (reason, message, field), e.g. ('FieldValueRequired',
        'Required value', 'spec.containers')."""
        summary = ", ".join(f"{f}: {m}" for _, m, f in causes)
        many = f"[{summary}]" if len(causes) > 1 else summary
        details = {
            "name": name,
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, m, f in causes],
        }
        return cls(422, "Invalid", f'{kind} "{name}" is invalid: {many}', details)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def gone(cls, requested: int, oldest: int) -> ApiError:
        return cls(410, "Expired", f"too old resource version: {requested} ({oldest})")

    @classmethod
    def unauthorized(cls) -> ApiError:
        return cls(401, "Unauthorized", "Unauthorized")

    @classmethod
    def method_not_allowed(cls) -> ApiError:
        return cls(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    @classmethod
    def unsupported_media(cls, content_type: str) -> ApiError:
        return cls(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/merge-patch+json, application/strategic-merge-patch+json "
            f"(got {content_type})",
        )
