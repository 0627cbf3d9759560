"""Label and field selectors as the apiserver parses them (`labelSelector=`,
`fieldSelector=` query parameters): `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
`a notin (x)`, `a`, `!a`; field selectors take `=`, `==` and `!=` on dotted paths."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.support.kube_fake.statuses import ApiError

Predicate = Callable[[dict[str, Any]], bool]

_SET = re.compile(r"^\s*(!?)([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)([\w./-]+)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split at commas outside parentheses (`a in (x,y),b=c`)."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current)
    return terms


def _label_term(term: str) -> Predicate:
    if match := _SET.match(term):
        _, key, op, values = match.groups()
        wanted = {v.strip() for v in values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in wanted
        return lambda labels: labels.get(key) not in wanted
    if match := _EQ.match(term):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(term):
        negated, key = match.groups()
        return (lambda labels: key not in labels) if negated else (lambda labels: key in labels)
    raise ApiError.bad_request(f"unable to parse requirement: {term!r}")


def label_selector(text: str | None) -> Predicate:
    """A predicate over an object's labels; everything matches an empty selector."""
    terms = [_label_term(t) for t in _split_terms(text or "")]
    return lambda obj: all(t((obj.get("metadata") or {}).get("labels") or {}) for t in terms)


def _field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector(text: str | None) -> Predicate:
    terms: list[Predicate] = []
    for term in _split_terms(text or ""):
        match = _EQ.match(term)
        if not match:
            raise ApiError.bad_request(f"invalid selector: {term!r}; can't understand {term!r}")
        path, op, value = match.groups()
        if op == "!=":
            terms.append(lambda o, p=path, v=value: _field_value(o, p) != v)
        else:
            terms.append(lambda o, p=path, v=value: _field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in terms)
