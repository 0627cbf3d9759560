"""Words of a Dockerfile the way the builder reads them: quotes, escapes and `$VAR`.

The structure comes from BuildKit's own parser (the `dockerfile` package); what
it leaves raw — the arguments of ENV, LABEL, ARG, COPY, FROM … — is processed
here as moby's `frontend/dockerfile/shell/lex.go` does: single quotes are
literal, double quotes allow `$` expansion and `\\"`, the escape character
quotes the next one, `$NAME`, `${NAME}`, `${NAME:-word}`, `${NAME-word}`,
`${NAME:+word}`, `${NAME+word}` and `${NAME:?message}` expand, and unquoted
expansions split into words.

`strict=True` (image references) refuses any variable without a value instead
of expanding it to nothing: an access check must see the name the engine
would see, or nothing at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class WordError(ValueError):
    """A word that cannot be processed; the message says why."""


@dataclass
class _Words:
    """Collects words; with `split`, characters from unquoted text split on whitespace."""

    split: bool = True
    words: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    started: bool = False

    def add(self, ch: str) -> None:
        if self.split and ch.isspace():
            self.end()
        else:
            self.raw(ch)

    def raw(self, text: str) -> None:
        self.current.append(text)
        self.started = True

    def end(self) -> None:
        if self.started:
            self.words.append("".join(self.current))
        self.current, self.started = [], False


class _Lexer:
    def __init__(self, text: str, env: Mapping[str, str], escape: str, strict: bool) -> None:
        self.text, self.env, self.escape, self.strict = text, env, escape, strict
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def next(self) -> str:
        ch = self.peek()
        self.pos += 1 if ch else 0
        return ch

    def run(self, out: _Words, stop: str = "") -> None:
        while (ch := self.peek()) and ch != stop:
            self.pos += 1
            if ch == "'":
                out.raw(self._single_quoted())
            elif ch == '"':
                out.raw(self._double_quoted())
            elif ch == "$":
                for c in self._dollar():
                    out.add(c)
            elif ch == self.escape:
                escaped = self.next()
                out.raw(escaped if escaped else ch)
            else:
                out.add(ch)

    def _single_quoted(self) -> str:
        end = self.text.find("'", self.pos)
        if end < 0:
            raise WordError(f"unexpected end of text: no closing quote in {self.text!r}")
        value, self.pos = self.text[self.pos : end], end + 1
        return value

    def _double_quoted(self) -> str:
        parts: list[str] = []
        while True:
            ch = self.next()
            if not ch:
                raise WordError(f'unexpected end of text: no closing " in {self.text!r}')
            if ch == '"':
                return "".join(parts)
            if ch == "$":
                parts.append(self._dollar())
            elif ch == self.escape and self.peek() in ('"', "$", self.escape):
                parts.append(self.next())
            else:
                parts.append(ch)

    def _dollar(self) -> str:
        ch = self.peek()
        if ch == "{":
            self.pos += 1
            return self._braced()
        name = self._name()
        return self._value(name) if name else "$"

    def _name(self) -> str:
        start = self.pos
        if self.peek().isdigit():
            self.pos += 1
            return self.text[start : self.pos]
        while self.peek() and self.peek() in _NAME_CHARS:
            self.pos += 1
        return self.text[start : self.pos]

    def _braced(self) -> str:
        name = self._name()
        if not name:
            raise WordError(f"bad substitution in {self.text!r}")
        op = self.next()
        if op == "}":
            return self._value(name)
        colon = op == ":"
        if colon:
            op = self.next()
        if op not in ("-", "+", "?"):
            raise WordError(f"unsupported modifier {op!r} in ${{{name}…}} of {self.text!r}")
        word = _Words(split=False)
        self.run(word, stop="}")
        if self.next() != "}":
            raise WordError(f"missing '}}' in {self.text!r}")
        return self._modified(name, op, colon, "".join(word.current))

    def _modified(self, name: str, op: str, colon: bool, word: str) -> str:
        value = self.env.get(name)
        unset = value is None or (colon and value == "")
        if op == "-":
            return word if unset else str(value)
        if op == "+":
            return "" if unset else word
        if unset:
            raise WordError(f"{name}: {word or 'parameter not set'}")
        return str(value)

    def _value(self, name: str) -> str:
        value = self.env.get(name)
        if value is None and self.strict:
            raise WordError(f"${name} has no value here (declare it with ARG {name}=…)")
        return value or ""


def words(
    text: str, env: Mapping[str, str], *, escape: str = "\\", strict: bool = False
) -> list[str]:
    """Expand and split into words (what COPY, EXPOSE, VOLUME … see)."""
    out = _Words()
    _Lexer(text, env, escape, strict).run(out)
    out.end()
    return out.words


def word(text: str, env: Mapping[str, str], *, escape: str = "\\", strict: bool = False) -> str:
    """Expand one word, keeping its inner spaces (what ENV values, FROM see)."""
    out = _Words(split=False)
    _Lexer(text, env, escape, strict).run(out)
    return "".join(out.current)
