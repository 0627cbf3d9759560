"""The Xid catalogue, row by row: what each Xid makes gpudock do."""

from __future__ import annotations

import pytest

from gpudock.gpu.xid import XID_RULES, Action, rule_for

EXPECTED = {
    13: Action.NOTIFY,
    31: Action.NOTIFY,
    43: Action.NOTIFY,
    45: Action.NOTIFY,
    48: Action.MIGRATE,
    61: Action.MIGRATE,
    62: Action.MIGRATE,
    63: Action.MIGRATE_DEFERRED,
    64: Action.MIGRATE,
    68: Action.NOTIFY,
    74: Action.MIGRATE,
    79: Action.DRAIN_HOST,
    92: Action.MIGRATE_DEFERRED,
    94: Action.NOTIFY,
    95: Action.MIGRATE,
    109: Action.MIGRATE,
    119: Action.MIGRATE,
    120: Action.MIGRATE,
    140: Action.MIGRATE,
}


@pytest.mark.parametrize(("xid", "action"), sorted(EXPECTED.items()))
def test_each_catalogued_xid_maps_to_its_action(xid: int, action: Action) -> None:
    rule = rule_for(xid)
    assert rule.xid == xid and rule.action == action and rule.name


def test_the_table_has_exactly_the_reviewed_rows() -> None:
    assert set(XID_RULES) == set(EXPECTED)


def test_an_unknown_xid_is_reported_not_acted_on() -> None:
    rule = rule_for(9999)
    assert rule.action == Action.NOTIFY and rule.name == "unknown Xid"
