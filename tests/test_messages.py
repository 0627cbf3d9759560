"""Messages: the structure survives storage, every template reads back from its
English rendering, translations keep their fields, languages are negotiated."""

from __future__ import annotations

import re

import pytest

from gpudock.messages import Message, joined, localize, negotiate, parse
from gpudock.messages.catalog import ZH_CN_MESSAGES

_FIELD = re.compile(r"{(\w+)}")


def test_translations_keep_every_field_of_their_template() -> None:
    for english, chinese in ZH_CN_MESSAGES.items():
        assert set(_FIELD.findall(english)) == set(_FIELD.findall(chinese)), english


def test_a_message_is_its_english_text_and_keeps_its_structure() -> None:
    gpus = Message("{count} × {models}", count=2, models="A100-80GB")
    reason = Message("running on {host} ({gpus})", host="sim0", gpus=gpus)
    assert reason == "running on sim0 (2 × A100-80GB)"
    again = Message.from_json(reason.to_json())
    assert (again, again.key, again.params["gpus"].key) == (reason, reason.key, gpus.key)
    assert localize(reason, "zh-CN") == "运行于 sim0（2 × A100-80GB）"
    assert localize(reason, "en") == reason


@pytest.mark.parametrize(
    ("text", "chinese"),
    [
        ("stopped; data kept", "已关机；数据保留"),
        ("waiting for 4 × A100-80GB", "等待 4 × A100-80GB"),
        ("moving: waiting for a healthy 1 × RTX4090-24GB; no capacity free now", None),
        ("60 s × 1 × RTX4090-24GB at 2.5/h", "60 秒 × 1 × RTX4090-24GB，单价 2.5/小时"),
        ("refund of 30 s × 2 × A100-80GB at 7.2/h charged ahead of the stop", None),
    ],
)
def test_stored_english_reads_back_as_its_template(text: str, chinese: str | None) -> None:
    found = parse(text)
    assert found is not None and found == text
    shown = localize(text, "zh-CN")
    assert shown != text and not re.search(r"\b(waiting|stopped|refund|at)\b", shown)
    if chinese is not None:
        assert shown == chinese


def test_parts_of_a_joined_message_are_translated_each() -> None:
    both = joined([Message("stop requested"), Message("restart requested")])
    assert both == "stop requested; restart requested"
    assert localize(both, "zh-CN") == "已请求关机；已请求重启"
    assert localize("stop requested; something else", "zh-CN") == "已请求关机；something else"
    assert parse("nothing anyone wrote down") is None


@pytest.mark.parametrize(
    ("header", "language"),
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", "zh-CN"),
        ("en-US,en;q=0.9,zh-CN;q=0.8", "en"),
        ("fr-FR, zh-TW;q=0.5", "zh-CN"),
        ("en;q=0.2, zh;q=0.9", "zh-CN"),
        ("de", "en"),
        (None, "en"),
        ("zh_CN.UTF-8", "zh-CN"),
    ],
)
def test_the_language_is_the_first_wanted_that_we_have(header: str | None, language: str) -> None:
    assert negotiate(header) == language
