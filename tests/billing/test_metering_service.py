"""Metering over the database, driven by a fake clock (no sleeps): intervals at
the runtime's timestamps, incremental charges, replays, protection, storage."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from gpudock.billing.metering import elapsed_seconds
from gpudock.db.models import (
    BillingAccountModel,
    BillingIntervalModel,
    BillingPostingModel,
    InstanceEventModel,
    InstanceModel,
    UserModel,
)
from gpudock.errors import PaymentRequired
from gpudock.platform import Platform
from gpudock.reconcile import charging
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.billing import balances as billing
from gpudock.services.billing import postings as ledger
from gpudock.services.billing import statements
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from tests.support.billing import MakePlatform, new_user, price, topup
from tests.support.clocks import FakeClock
from tests.support.foreground import CountingForeground

A100 = InstanceRequest(gpu_model="A100-80GB", gpu_count=1)


def postings(platform: Platform, instance_id: str) -> list[BillingPostingModel]:
    with platform.ctx.sessions() as session:
        return list(
            session.scalars(
                select(BillingPostingModel)
                .where(BillingPostingModel.instance_id == instance_id)
                .order_by(BillingPostingModel.id)
            )
        )


def intervals(
    platform: Platform, instance_id: str, kind: str = "compute"
) -> list[BillingIntervalModel]:
    with platform.ctx.sessions() as session:
        return list(
            session.scalars(
                select(BillingIntervalModel)
                .where(
                    BillingIntervalModel.instance_id == instance_id,
                    BillingIntervalModel.kind == kind,
                )
                .order_by(BillingIntervalModel.opened_at)
            )
        )


def row(platform: Platform, instance_id: str) -> InstanceModel:
    with platform.ctx.sessions() as session:
        found = session.get(InstanceModel, instance_id)
        assert found is not None
        return found


def events(platform: Platform, instance_id: str) -> list[str]:
    with platform.ctx.sessions() as session:
        return list(
            session.scalars(
                select(InstanceEventModel.message)
                .where(InstanceEventModel.instance_id == instance_id)
                .order_by(InstanceEventModel.id)
            )
        )


def assert_books_balance(platform: Platform) -> None:
    with platform.ctx.sessions() as session:
        assert ledger.verify_balances(session) == {}
        assert ledger.verify_month_totals(session) == {}


def charged_seconds(platform: Platform, instance_id: str) -> int:
    return sum(
        -p.seconds if p.kind == "refund" else p.seconds
        for p in postings(platform, instance_id)
        if p.rate_per_s == 3600
    )


def run(platform: Platform, user: UserModel, request: InstanceRequest = A100) -> str:
    created = instances.create_instance(platform.ctx, user, request)
    platform.reconciler.drain()
    assert row(platform, created.id).status == "running"
    return created.id


@pytest.fixture
def alice(platform: Platform) -> UserModel:
    user = new_user(platform, "alice")
    price(platform, "A100-80GB", "3.6")  # 1000 µ per second
    topup(platform, user, "100")
    return user


def test_charges_follow_the_runtimes_clock_to_the_second(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    clock.advance(0.25)
    instance_id = run(platform, alice)
    [interval] = intervals(platform, instance_id)
    assert interval.opened_at == clock.now  # the fake runtime's started_at
    assert interval.rate_micro == 3_600_000 and interval.gpu_model == "A100-80GB"

    clock.advance(150.5)
    assert charging.charge_pass(platform.ctx).postings == 1
    assert [(p.seconds, p.amount_micro) for p in postings(platform, instance_id)] == [
        (120, 120_000)
    ]
    assert charging.charge_pass(platform.ctx).postings == 0  # the same pass again: nothing

    instances.stop_instance(platform.ctx, alice, instance_id)
    clock.advance(3.7)  # the container stops a little after the request
    platform.reconciler.drain()
    stopped = row(platform, instance_id)
    assert stopped.status == "stopped"
    [interval] = intervals(platform, instance_id)
    assert interval.closed_at == clock.now  # the runtime's finished_at, not the API call's
    expected = elapsed_seconds(interval.opened_at, interval.closed_at)
    assert expected == 154
    assert charged_seconds(platform, instance_id) == expected
    assert sum(p.amount_micro for p in postings(platform, instance_id)) == expected * 1000
    summary = billing.summary(platform.ctx, alice)
    assert summary.balance == 100_000_000 - 154_000 and summary.unposted == 0
    [usage] = statements.usage(platform.ctx, alice, None, None)
    assert (usage.seconds, usage.gpu_seconds, usage.compute_amount) == (154, 154, 154_000)
    assert_books_balance(platform)


def test_charging_steps_aside_for_requests_and_still_charges(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    instance_id = run(platform, alice)
    clock.advance(150)
    platform.ctx.foreground = counting = CountingForeground()
    counting.enter()  # a request in flight for the whole pass
    assert charging.charge_pass(platform.ctx).postings == 1
    assert len(counting.waits) == 1 and counting.waits[0] >= 0.01  # one transaction, held back
    assert [p.seconds for p in postings(platform, instance_id)] == [120]


def test_a_restart_and_a_crashed_container_bill_exactly_what_ran(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    instance_id = run(platform, alice, replace(A100, gpu_count=2))
    clock.advance(100)
    instances.restart_instance(platform.ctx, alice, instance_id)
    platform.reconciler.drain()
    clock.advance(200)
    charging.charge_pass(platform.ctx)  # charges 180 s of the second interval
    # The container dies on its own 50 s ago; the health check notices now.
    runtime = platform.ctx.runtime
    assert isinstance(runtime, FakeRuntime)
    container = runtime.containers[row(platform, instance_id).container_id or ""]
    container.state = replace(
        container.state,
        running=False,
        status="exited",
        finished_at=clock.now - timedelta(seconds=50),
    )
    from gpudock.reconcile.liveness import check_running

    check_running(platform.ctx)
    platform.reconciler.drain()
    first, second, third = intervals(platform, instance_id)
    assert elapsed_seconds(first.opened_at, first.closed_at or clock.now) == 100
    assert elapsed_seconds(second.opened_at, second.closed_at or clock.now) == 150
    assert third.closed_at is None and third.opened_at == clock.now
    kinds = [p.kind for p in postings(platform, instance_id)]
    assert kinds.count("refund") == 1  # 30 s charged ahead of the crash come back
    assert charged_seconds(platform, instance_id) == 250
    assert (
        sum(
            -p.amount_micro if p.kind == "refund" else p.amount_micro
            for p in postings(platform, instance_id)
        )
        == 250 * 2000
    )
    assert_books_balance(platform)


def test_duplicate_deliveries_and_a_rolled_back_pass_change_nothing(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    instance_id = run(platform, alice)
    from gpudock.services.billing import intervals as metering

    with platform.ctx.sessions.begin() as session:  # "running" delivered twice
        instance = session.get(InstanceModel, instance_id)
        assert instance is not None
        metering.on_transition(
            session, instance, instance.status.__class__("creating"), instance.status, clock.now
        )
    assert len(intervals(platform, instance_id)) == 1

    clock.advance(65)

    class Crash(Exception):
        pass

    with pytest.raises(Crash), platform.ctx.sessions.begin() as session:  # killed mid-pass
        charging.charge_batch(platform.ctx, session, [alice.id], clock.now, charging.PassReport())
        raise Crash
    assert postings(platform, instance_id) == []
    charging.charge_pass(platform.ctx)
    charging.charge_pass(platform.ctx)
    assert [p.seconds for p in postings(platform, instance_id)] == [60]
    assert_books_balance(platform)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_passes_never_charge_twice(
    make_platform: MakePlatform, clock: FakeClock, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    platform = make_platform(url)
    user = new_user(platform, "carol")
    price(platform, "A100-80GB", "3.6")
    price(platform, None, "0.36", kind="no_gpu")
    topup(platform, user, "1000")
    ids = [run(platform, user) for _ in range(3)]
    ids.append(run(platform, user, InstanceRequest(gpu_model=None, gpu_count=0)))
    clock.advance(3600)
    errors: list[BaseException] = []

    def one_pass() -> None:
        try:
            charging.charge_pass(platform.ctx)
        except BaseException as exc:  # an IntegrityError here would be a double charge
            errors.append(exc)

    threads = [threading.Thread(target=one_pass) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for instance_id in ids:
        assert charged_seconds(platform, instance_id) == 3600
    assert billing.summary(platform.ctx, user).balance == 1000_000_000 - 3 * 3_600_000 - 360_000
    assert_books_balance(platform)


def test_low_balance_warns_then_stops_and_keeps_the_data(
    make_platform: MakePlatform, clock: FakeClock
) -> None:
    platform = make_platform(billing_min_balance_seconds=300, billing_low_balance_warn_s=240)
    dora = new_user(platform, "dora")
    price(platform, "A100-80GB", "3.6")
    topup(platform, dora, "0.3")  # 300 s at 1000 µ/s
    instance_id = run(platform, dora)
    clock.advance(70)
    assert charging.charge_pass(platform.ctx).warned == [instance_id]  # 230 s left
    assert charging.charge_pass(platform.ctx).warned == []  # once per interval
    clock.advance(180)  # 50 s left: less than the next period
    report = charging.charge_pass(platform.ctx)
    assert report.stopped == [instance_id]
    stopping = row(platform, instance_id)
    assert stopping.desired_state == "stopped" and stopping.status == "stopping"
    clock.advance(1)
    platform.reconciler.drain()
    stopped = row(platform, instance_id)
    assert stopped.status == "stopped" and stopped.status_reason.startswith("billing: stopped")
    assert stopped.status_reason.endswith("data kept")
    assert "top up (ask an admin) and start again" in stopped.status_reason
    runtime = platform.ctx.runtime
    assert isinstance(runtime, FakeRuntime)
    cluster = platform.ctx.cluster_id
    assert containers.volume_name(cluster, instance_id) in runtime.volumes  # never deleted
    assert runtime.inspect_container(containers.container_name(cluster, instance_id))
    assert any("low balance" in m for m in events(platform, instance_id))
    assert billing.summary(platform.ctx, dora).balance >= 0
    assert charged_seconds(platform, instance_id) == 251

    with pytest.raises(PaymentRequired, match="does not cover 300 s"):
        instances.start_instance(platform.ctx, dora, instance_id)
    topup(platform, dora, "1")
    instances.start_instance(platform.ctx, dora, instance_id)
    platform.reconciler.drain()
    assert row(platform, instance_id).status == "running"
    assert_books_balance(platform)


def test_create_and_start_need_the_minimum_only_when_priced(
    platform: Platform, clock: FakeClock
) -> None:
    erin = new_user(platform, "erin")
    free = run(platform, erin, InstanceRequest(gpu_model="RTX4090-24GB", gpu_count=1))
    price(platform, "A100-80GB", "3.6")
    with pytest.raises(PaymentRequired) as refused:
        instances.create_instance(platform.ctx, erin, A100)
    assert "balance 0 CNY does not cover 3600 s of 1 × A100-80GB at 3.6 CNY/h" in str(refused.value)
    topup(platform, erin, "3.599999")
    with pytest.raises(PaymentRequired):
        instances.create_instance(platform.ctx, erin, A100)
    topup(platform, erin, "0.000001")
    run(platform, erin)
    assert intervals(platform, free)[0].rate_micro == 0  # free time is metered, not charged
    clock.advance(600)
    charging.charge_pass(platform.ctx)
    assert postings(platform, free) == []


def test_placement_checks_the_balance_again(platform: Platform, clock: FakeClock) -> None:
    fred, gina = new_user(platform, "fred"), new_user(platform, "gina")
    holder = run(platform, fred, replace(A100, gpu_count=4))  # free for now: all A100s taken
    price(platform, "A100-80GB", "1")
    topup(platform, gina, "1")
    waiting = instances.create_instance(platform.ctx, gina, A100)
    platform.reconciler.drain()
    assert row(platform, waiting.id).status_reason == "waiting for 1 × A100-80GB"
    price(platform, "A100-80GB", "10")  # gina's 1 CNY no longer covers an hour
    instances.stop_instance(platform.ctx, fred, holder)
    platform.reconciler.drain()
    refused = row(platform, waiting.id)
    assert refused.status == "stopped" and refused.desired_state == "stopped"
    assert refused.status_reason.startswith("not started: balance 1 CNY does not cover")


def test_stopped_disks_accrue_per_gb_day_until_started(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    price(platform, None, "0.02", kind="disk")  # 50 GB → 1 CNY per day
    instance_id = run(platform, alice)
    clock.advance(10)
    instances.stop_instance(platform.ctx, alice, instance_id)
    platform.reconciler.drain()
    clock.advance(86_400 + 1800)
    charging.charge_pass(platform.ctx)
    storage = [p for p in postings(platform, instance_id) if p.kind == "storage"]
    assert sum(p.seconds for p in storage) == 86_400  # whole hours so far
    instances.start_instance(platform.ctx, alice, instance_id)
    platform.reconciler.drain()
    storage = [p for p in postings(platform, instance_id) if p.kind == "storage"]
    assert sum(p.seconds for p in storage) == 86_400 + 1800
    assert sum(p.amount_micro for p in storage) == (86_400 + 1800) * 1_000_000 // 86_400
    [usage] = statements.usage(platform.ctx, alice, None, None)
    assert usage.storage_seconds == 88_200 and usage.seconds == 10
    assert_books_balance(platform)


def test_a_monthly_budget_stops_like_an_empty_balance(
    platform: Platform, alice: UserModel, clock: FakeClock
) -> None:
    billing.set_budget(platform.ctx, alice, 200_000)  # 200 s at 1000 µ/s
    instance_id = run(platform, alice)
    clock.advance(150)
    report = charging.charge_pass(platform.ctx)
    assert report.stopped == [instance_id]
    reason = row(platform, instance_id).status_reason
    assert "monthly budget left" in reason
    assert "raise or clear the monthly budget" in reason and "top up" not in reason
    platform.reconciler.drain()
    assert row(platform, instance_id).status == "stopped"
    assert billing.summary(platform.ctx, alice).month_spent == 150_000
    billing.set_budget(platform.ctx, alice, 190_000)  # 40 s left: less than a period
    with pytest.raises(PaymentRequired, match=r"budget of 0\.19 CNY has 0\.04 CNY left"):
        instances.start_instance(platform.ctx, alice, instance_id)
    billing.set_budget(platform.ctx, alice, None)
    instances.start_instance(platform.ctx, alice, instance_id)


def test_verify_balances_names_an_account_whose_balance_drifted(
    platform: Platform, alice: UserModel
) -> None:
    assert_books_balance(platform)
    account_id = ledger.user_account(alice.id)
    with platform.ctx.sessions.begin() as session:
        session.execute(
            update(BillingAccountModel)
            .where(BillingAccountModel.id == account_id)
            .values(balance_micro=BillingAccountModel.balance_micro + 7)
        )
    with platform.ctx.sessions() as session:
        assert ledger.verify_balances(session) == {account_id: (100_000_007, 100_000_000)}
