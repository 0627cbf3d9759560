"""On SQLite every write transaction takes the one write lock (`BEGIN IMMEDIATE`),
so a create or start that reads its image, the fleet and the sizes inside such
transactions queues behind every other writer several times. Each takes one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from gpudock.platform import Platform
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from tests.support.billing import new_user, price, topup
from tests.support.platforms import PlatformFactory


@contextmanager
def write_transactions(platform: Platform) -> Iterator[list[str]]:
    """The `BEGIN IMMEDIATE`s (write transactions) issued while the block runs."""
    engine = platform.ctx.sessions.kw["bind"]
    begun: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            begun.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield begun
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_create_and_a_start_each_take_one_write_transaction(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory()  # SQLite, the simulated fleet: sizing asks the engine too
    price(platform, "A100-80GB", "3.6")  # priced: the funds check locks the account
    user = new_user(platform, "alice")
    topup(platform, user, "100")
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="train", cpu=2)

    with write_transactions(platform) as begun:
        created = actions.create_instance(platform.ctx, user, request)
    assert len(begun) == 1
    assert (created.cpu, created.gpu_count) == (2, 1)  # the sizes read before it still apply

    actions.stop_instance(platform.ctx, user, "train")
    with write_transactions(platform) as begun:
        actions.start_instance(platform.ctx, user, "train")
    assert len(begun) == 1
