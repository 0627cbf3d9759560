"""Human texts as message ids with parameters, rendered in the reader's language.

A `Message` is a `str` — its English rendering — that also remembers its id
(the English template, as gettext's msgid is the English source) and its
parameters. Code that only passes text along keeps working; code that stores
or shows it keeps the structure:

    reason = Message("running on {host} ({gpus})", host="node-1", gpus="2 × A100-80GB")
    str(reason)                     → 'running on node-1 (2 × A100-80GB)'
    localize(reason, "zh-CN")       → '运行于 node-1（2 × A100-80GB）'
    reason.to_json()                → {'id': 'running on {host} ({gpus})', 'params': {...}}

Stored texts keep the English rendering in their column (the API's field, the
CSV) and the structure beside it (`*_msg`, JSON), so the same event reads in
either language. A plain string — one written before, or by code that builds
no `Message` — is looked up whole, then matched against the catalog's
templates (`parse`), then split at "; " and each part tried; what matches
nothing stays English, which the console's zh-CN crawl test reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from gpudock.messages.catalog import CATALOGS

SEPARATOR = "; "
# Fields that hold a whole sentence (which may have parts) rather than a name or a number.
SENTENCE_FIELDS = frozenset({"reason", "what", "error", "charge", "why", "fault", "advice"})
_FIELD = re.compile(r"{(\w+)}")


class Message(str):
    """English text with the template and parameters it was made from."""

    key: str
    params: dict[str, Any]

    def __new__(cls, key: str, /, **params: Any) -> Message:
        text = key.format(**{k: str(v) for k, v in params.items()}) if params else key
        made = super().__new__(cls, text)
        made.key = key
        made.params = params
        return made

    def to_json(self) -> dict[str, Any]:
        params = {k: v.to_json() if isinstance(v, Message) else v for k, v in self.params.items()}
        return {"id": self.key, "params": params}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        params = {
            k: cls.from_json(v) if isinstance(v, Mapping) else v
            for k, v in dict(data.get("params") or {}).items()
        }
        return cls(str(data["id"]), **params)


def joined(parts: Iterable[str], separator: str = SEPARATOR) -> Message:
    """Several messages as one ('a; b'), each part translated on its own."""
    items = list(parts)
    key = separator.join("{p" + str(n) + "}" for n in range(len(items)))
    return Message(key, **{f"p{n}": part for n, part in enumerate(items)})


def stored(text: str) -> dict[str, Any] | None:
    """The structure to store beside `text`, or None for a plain string."""
    return text.to_json() if isinstance(text, Message) else None


def localize(
    text: str | None,
    language: str,
    structure: Mapping[str, Any] | None = None,
    catalog: Mapping[str, str] | None = None,
) -> str:
    """`text` in `language`: from its structure (a `Message`, or the stored JSON)
    when it has one, else by the plain-string rules in the module docstring.
    `catalog`: one to use instead of the language's (the console adds its own)."""
    if not text and not structure:
        return text or ""
    catalog = catalog if catalog is not None else CATALOGS.get(language)
    if not catalog:
        return str(text)
    if structure:
        return _render(Message.from_json(structure), catalog)
    if isinstance(text, Message):
        return _render(text, catalog)
    return _plain(str(text), catalog, language)


def _render(message: Message, catalog: Mapping[str, str]) -> str:
    if not message.params:
        return catalog.get(message.key, message.key)
    template = catalog.get(message.key)
    if template is None:  # a joined list ('{p0}; {p1}') takes the language's separator
        bare = not _FIELD.sub("", message.key).replace(SEPARATOR, "")
        template = (
            message.key.replace(SEPARATOR, catalog.get(SEPARATOR, SEPARATOR))
            if bare
            else message.key
        )
    values = {k: _value(v, catalog) for k, v in message.params.items()}
    return template.format(**values)


def _value(value: Any, catalog: Mapping[str, str]) -> str:
    if isinstance(value, Message):
        return _render(value, catalog)
    return str(value)  # a name, a number: as it is


def _plain(text: str, catalog: Mapping[str, str], language: str) -> str:
    if text in catalog:
        return catalog[text]
    found = parse(text, language)
    if found is not None:
        return _render(found, catalog)
    if SEPARATOR in text:
        return catalog.get(SEPARATOR, SEPARATOR).join(
            _plain(part, catalog, language) for part in text.split(SEPARATOR)
        )
    return text


def parse(text: str, language: str = "zh-CN") -> Message | None:
    """The catalog template `text` is a rendering of, with its parameters; None when
    none fits. Used to migrate stored texts and for plain strings at read time.
    Parameters are parsed recursively, so 'moving: waiting for 2 × A100' nests."""
    if text in CATALOGS.get(language, {}):
        return Message(text)
    for key, pattern in _patterns(language):
        match = pattern.fullmatch(text)
        if match:
            params = {k: _parse_part(v, language) for k, v in match.groupdict().items()}
            return Message(key, **params)
    return None


def _parse_part(value: str, language: str) -> str:
    found = parse(value, language)
    if found is not None or SEPARATOR not in value:
        return found or value
    return joined(parse(part, language) or part for part in value.split(SEPARATOR))


@cache
def _patterns(language: str) -> list[tuple[str, re.Pattern[str]]]:
    """Templates with fields, the most literal text first (so 'moving: {reason}'
    is tried before '{reason}; data kept' swallows a part of it)."""
    keys = [k for k in CATALOGS.get(language, {}) if _FIELD.search(k) and _FIELD.sub("", k)]
    keys.sort(key=lambda k: len(_FIELD.sub("", k)), reverse=True)
    return [(k, _compile(k)) for k in keys]


def _compile(template: str) -> re.Pattern[str]:
    pieces: list[str] = []
    seen: set[str] = set()
    last = 0
    for match in _FIELD.finditer(template):
        pieces.append(re.escape(template[last : match.start()]))
        name = match.group(1)
        if name in seen:
            pieces.append(f"(?P={name})")
        else:  # only fields that hold a sentence may hold a "; "
            pieces.append(f"(?P<{name}>.+?)" if name in SENTENCE_FIELDS else f"(?P<{name}>[^;]+?)")
        seen.add(name)
        last = match.end()
    pieces.append(re.escape(template[last:]))
    return re.compile("".join(pieces), re.DOTALL)


LANGUAGES = ("en", "zh-CN")
DEFAULT_LANGUAGE = "en"


def negotiate(accept_language: str | None) -> str:
    """The first language of an Accept-Language header (or a locale such as
    'zh_CN.UTF-8') that we have; English otherwise. Quality values are honoured."""
    choices: list[tuple[float, int, str]] = []
    for order, part in enumerate((accept_language or "").split(",")):
        tag, _, rest = part.strip().partition(";")
        quality = 1.0
        if rest.strip().startswith("q="):
            try:
                quality = float(rest.strip()[2:])
            except ValueError:
                quality = 0.0
        choices.append((-quality, order, tag.strip().lower().replace("_", "-")))
    for _quality, _order, tag in sorted(choices):
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en"):
            return "en"
    return DEFAULT_LANGUAGE
