"""Background passes step aside for requests in flight (`services/foreground.py`)."""

from __future__ import annotations

import threading

from gpudock.services.foreground import Foreground

DEADLINE_S = 30.0


def test_nothing_in_flight_costs_no_wait() -> None:
    foreground = Foreground(max_wait_s=DEADLINE_S)
    assert not foreground.busy()
    assert foreground.step_aside() == 0.0


def test_a_young_request_holds_a_pass_back_until_its_bound() -> None:
    foreground = Foreground(max_wait_s=0.05)
    foreground.enter()
    assert foreground.busy()
    assert foreground.step_aside() >= 0.05  # it waited the whole bound: still in flight


def test_the_last_request_leaving_lets_the_waiting_pass_go() -> None:
    foreground = Foreground(max_wait_s=DEADLINE_S)
    tickets = [foreground.enter(), foreground.enter()]
    waited: list[float] = []
    waiter = threading.Thread(target=lambda: waited.append(foreground.step_aside()))
    waiter.start()
    foreground.leave(tickets[0])
    assert foreground.busy()  # one is still in flight
    foreground.leave(tickets[1])
    waiter.join(DEADLINE_S)
    assert not waiter.is_alive() and waited[0] < DEADLINE_S  # woken, not timed out
    assert not foreground.busy()


def test_a_long_request_no_longer_holds_passes_back() -> None:
    """A long poll or a download would otherwise slow every pass for its duration."""
    foreground = Foreground(young_s=0.0, max_wait_s=DEADLINE_S)
    foreground.enter()
    assert not foreground.busy()
    assert foreground.step_aside() < DEADLINE_S
