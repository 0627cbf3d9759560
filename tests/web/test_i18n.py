"""Every message the templates show, and every value they translate, has a zh-CN entry."""

from __future__ import annotations

import re
from pathlib import Path

import gpudock.web
from gpudock.billing.ledger import PostingKind
from gpudock.db.models import GpuState, InstanceStatus, SshSessionOutcome, UserState
from gpudock.services.accounts import tokens
from gpudock.services.billing import balances as billing
from gpudock.web.i18n import ZH_CN, translator
from gpudock.web.navigation import NAV_ENTRIES

TEMPLATES = Path(gpudock.web.__file__).parent / "templates"
_LITERAL = re.compile(r"""\bt\(\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')""")


def test_every_literal_message_in_the_templates_is_translated() -> None:
    found = {
        (path.name, (m.group(1) if m.group(1) is not None else m.group(2)).replace("\\'", "'"))
        for path in TEMPLATES.rglob("*.html")
        for m in _LITERAL.finditer(path.read_text())
    }
    assert len(found) > 150  # the pattern still finds the messages
    assert sorted(m for m in found if m[1] not in ZH_CN) == []


def test_translated_values_have_entries() -> None:
    values = [
        *(s.value for s in InstanceStatus),
        *(s.value for s in GpuState),
        *(o.value for o in SshSessionOutcome),
        *(s.value for s in UserState),
        *(s.value for s in tokens.TokenState),
        *(k.value for k in PostingKind),
        *billing.PRICE_KINDS,
        *billing.PRICE_UNITS.values(),
        *(p.label for p in NAV_ENTRIES),
    ]
    assert sorted(v for v in values if v not in ZH_CN) == []


def test_placeholders_survive_translation() -> None:
    zh = translator("zh-CN")
    for english, chinese in ZH_CN.items():
        assert set(re.findall(r"{\w+}", english)) == set(re.findall(r"{\w+}", chinese)), english
    assert zh("{n} days", n=7) == "7 天"
