"""`--wait`: follow an instance until it reaches a status, fails, or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.text import Text

from gpudock.api.schemas import InstancePublic
from gpudock.cli import output
from gpudock.cli.client import ApiClient, CliError, NotFoundError, quoted_path

POLL_S = 25.0  # one wait's longest (the server answers sooner at a change)
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class Waiter:
    """Waits on GET /instances/{id}/wait (the server answers at each change of
    status or reason, or after `poll_s`) until `deadline`.

    Done when the status is the target (or, for "deleted", the instance is gone).
    Raises CliError when the instance failed, when another request changed what it
    should become (its desired state is no longer the target), or at the deadline.
    """

    client: ApiClient
    timeout_s: float = DEFAULT_TIMEOUT_S
    quiet: bool = False
    poll_s: float = POLL_S
    clock: Callable[[], float] = field(default=time.monotonic)

    def wait(self, instance: InstancePublic, target: str) -> InstancePublic:
        """Return the instance as last seen in the target status."""
        deadline = self.clock() + self.timeout_s
        current = instance
        with _progress(self.quiet, f"waiting for {instance.name} to be {target}") as show:
            while current.status != target:
                _check(current, target)
                remaining = deadline - self.clock()
                if remaining <= 0:
                    raise self._timed_out(current, target)
                show(f"{current.status} ({current.status_reason})")
                params = {
                    "status": target,
                    "changed_from": f"{current.status}|{current.status_reason}",
                    "timeout_s": f"{min(self.poll_s, remaining):.3f}",
                }
                try:
                    current = self.client.get(
                        quoted_path("instances", current.id, "wait"), InstancePublic, params=params
                    )
                except NotFoundError:
                    if target == "deleted":
                        return current
                    raise
        return current

    def _timed_out(self, instance: InstancePublic, target: str) -> CliError:
        return CliError(
            f"timed out after {self.timeout_s:g} s waiting for instance {instance.name} "
            f"to be {target}; it is still {instance.status} ({instance.status_reason})",
            hint=f"`gpudock instances show {instance.id}` shows what it is doing; "
            "--timeout waits longer",
        )


def _check(instance: InstancePublic, target: str) -> None:
    """Raise when the instance cannot reach `target` without another request."""
    name, status, reason = instance.name, instance.status, instance.status_reason
    desired = instance.desired_state
    if status == "failed" and desired != "running" and target != "deleted":
        raise CliError(
            f"instance {name} failed: {reason}",
            hint=f"`gpudock instances show {instance.id}` shows its events; "
            f"`gpudock instances start {instance.id}` tries again",
        )
    if desired != target:
        raise CliError(
            f"instance {name} is no longer meant to be {target}: another request asked for "
            f"{desired} (it is {status}: {reason})"
        )


@contextmanager
def _progress(quiet: bool, what: str) -> Iterator[Callable[[str], None]]:
    """A Rich spinner on stderr; `show(text)` updates it. Nothing at all when quiet."""
    if quiet:
        yield lambda _text: None
        return
    with output.stderr().status(Text(what)) as status:
        yield lambda text: status.update(Text(f"{what}: {text}"))
