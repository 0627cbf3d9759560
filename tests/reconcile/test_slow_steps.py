"""A lifecycle step stuck in a call is reported once, with where it waits."""

from __future__ import annotations

import logging
import threading

import pytest

from gpudock.reconcile.slow_steps import StepWatch


def _waiting_in_the_engine(watch: StepWatch, started: threading.Event, go: threading.Event) -> None:
    watch.started("inst-stuck")
    started.set()
    go.wait(timeout=30)
    watch.finished("inst-stuck")


def test_a_step_over_the_limit_is_logged_once_with_its_stack(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = StepWatch(limit_s=0.0)
    started, go = threading.Event(), threading.Event()
    step = threading.Thread(target=_waiting_in_the_engine, args=(watch, started, go))
    caplog.set_level(logging.WARNING, "gpudock.reconcile.slow_steps")
    step.start()
    try:
        assert started.wait(timeout=10)
        assert watch.report() == ["inst-stuck"]
        assert watch.report() == []  # once per step, not every pass
        assert "_waiting_in_the_engine" in caplog.text
        assert "go.wait(timeout=30)" in caplog.text
    finally:
        go.set()
        step.join(timeout=10)
    assert "inst-stuck: the slow step finished after" in caplog.text


def test_steps_within_the_limit_and_finished_ones_are_not_reported() -> None:
    watch = StepWatch(limit_s=3600.0)
    watch.started("inst-quick")
    assert watch.report() == []
    watch.finished("inst-quick")
    slow = StepWatch(limit_s=0.0)
    slow.started("inst-done")
    slow.finished("inst-done")
    assert slow.report() == []
