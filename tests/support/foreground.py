"""A request counter that records each time a pass stepped aside, and for how long."""

from __future__ import annotations

from gpudock.services.foreground import Foreground


class CountingForeground(Foreground):
    def __init__(self, max_wait_s: float = 0.01) -> None:
        super().__init__(max_wait_s=max_wait_s)
        self.waits: list[float] = []

    def step_aside(self) -> float:
        self.waits.append(super().step_aside())
        return self.waits[-1]
