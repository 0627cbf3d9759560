"""Billing in the console: admin prices and top-ups, the user's ledger, usage, chart and CSV."""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.billing import balances as billing
from gpudock.settings import Settings
from gpudock.web import charts
from tests.support.clocks import FakeClock
from tests.support.web import PASSWORD, Browser, log_in, make_user
from tests.web.test_pages import create


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def priced(tmp_path: Path, clock: FakeClock) -> Iterator[Platform]:
    """The console over a platform whose clock the test moves; alice and bob log in."""
    settings = Settings(
        data_dir=tmp_path / "data",
        simulate="1x4xA100-80GB,1x2xRTX4090-24GB",
        runtime="fake",
        image_pull="never",
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    make_user(platform, "alice")
    make_user(platform, "bob")
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    yield platform
    platform.close()


def balance_of(platform: Platform, name: str) -> int:
    user = next(u for u in users.list_users(platform.ctx) if u.name == name)
    return billing.summary(platform.ctx, user).balance


def topup_key(admin: Browser) -> str:
    found = re.search(r'name="key" value="([^"]+)"', admin.client.get("/admin/billing").text)
    assert found
    return found.group(1)


def test_billing_operator_page_is_for_admins_only(priced: Platform) -> None:
    alice = log_in(priced, "alice")
    assert alice.client.get("/admin/billing").status_code == 403
    price = {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "1"}
    assert alice.post("/admin/billing/prices", price).status_code == 403
    topup = {"user": "alice", "amount": "1000", "key": "k"}
    assert alice.post("/admin/billing/topups", topup).status_code == 403
    assert balance_of(priced, "alice") == 0 and billing.list_prices(priced.ctx) == []
    assert 'href="/admin/billing"' not in alice.client.get("/").text


def test_admin_sets_prices_with_inline_errors(priced: Platform) -> None:
    admin = log_in(priced, "admin")
    bad = admin.post(
        "/admin/billing/prices", {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "1e3"}
    )
    assert bad.status_code == 422 and "is not a decimal number" in bad.text
    unknown = admin.post("/admin/billing/prices", {"kind": "gpu", "gpu_model": "", "amount": "1"})
    assert unknown.status_code == 422 and "gpu_model goes with kind" in unknown.text
    ok = admin.post(
        "/admin/billing/prices", {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "7.2"}
    )
    assert ok.status_code == 200 and 'id="priced"' in ok.text
    assert 'data-price="gpu:A100-80GB"' in ok.text and "7.2" in ok.text
    prices = {p.key: p.amount_micro for p in billing.list_prices(priced.ctx)}
    assert prices == {"gpu:A100-80GB": 7_200_000}


def test_topup_form_credits_once_even_when_submitted_twice(priced: Platform) -> None:
    admin = log_in(priced, "admin")
    key = topup_key(admin)
    form = {"user": "alice", "amount": "100", "key": key, "note": "welcome"}
    first = admin.post("/admin/billing/topups", form)
    assert first.status_code == 201 and "Credited 100 CNY to alice" in first.text
    again = admin.post("/admin/billing/topups", form)  # a double click, a reload
    assert again.status_code == 201
    assert balance_of(priced, "alice") == 100_000_000
    assert topup_key(admin) != key  # each rendered form carries a fresh key
    bad = admin.post("/admin/billing/topups", {"user": "nobody", "amount": "5", "key": "x"})
    assert bad.status_code == 422 and "no user 'nobody'" in html.unescape(bad.text)
    zero = admin.post("/admin/billing/topups", {"user": "alice", "amount": "0", "key": "y"})
    assert zero.status_code == 422 and "more than zero" in zero.text


def test_user_sees_the_ledger_line_usage_chart_and_csv_after_a_run(
    priced: Platform, clock: FakeClock
) -> None:
    admin, alice, bob = log_in(priced, "admin"), log_in(priced, "alice"), log_in(priced, "bob")
    price = {"kind": "gpu", "gpu_model": "RTX4090-24GB", "amount": "3.6"}
    assert admin.post("/admin/billing/prices", price).status_code == 200
    topup = {"user": "alice", "amount": "50", "key": topup_key(admin)}
    assert admin.post("/admin/billing/topups", topup).status_code == 201
    instance_id = create(alice, name="paid", gpu_model="RTX4090-24GB", gpu_count="2")
    priced.reconciler.drain()
    clock.advance(3600)
    assert alice.post(f"/instances/{instance_id}/stop").status_code == 303
    priced.reconciler.drain()
    page = alice.client.get("/billing").text
    ledger = page.split('id="ledger"')[1]
    assert re.search(r'data-kind="compute">.*?>paid<.*?title="-7\.2"[^>]*>-7\.20<', ledger, re.S)
    assert 'data-kind="topup"' in ledger and ">50.00<" in ledger
    tiles = page.split('class="tiles"')[1].split("</div>\n</div>")[0]
    assert 'id="balance">' in tiles and 'title="42.8"' in tiles and ">42.80<" in tiles
    assert "nothing running that costs money" in tiles  # stopped: no runway to count
    usage = page.split('id="usage"')[1].split("</table>")[0]
    assert f'data-usage="{instance_id}"' in usage and "2 × RTX4090-24GB" in usage
    assert "1 h 00 min" in usage and "2.00" in usage  # one hour on two GPUs
    assert re.search(r'id="spend-chart".*?<rect [^>]*height="(?!0")', page, re.S)  # a real bar
    rows = list(csv.DictReader(io.StringIO(alice.client.get("/billing/ledger.csv").text)))
    compute = [r for r in rows if r["kind"] == "compute"]
    assert (
        len(compute) == 1
        and compute[0]["amount"] == "-7.2"
        and compute[0]["instance_name"] == "paid"
    )
    usage_csv = alice.client.get("/billing/usage.csv")
    assert usage_csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in usage_csv.headers["content-disposition"]
    assert f"{instance_id},paid,RTX4090-24GB,2,3600,7200" in usage_csv.text
    assert "paid" not in bob.client.get("/billing").text  # only one's own lines
    assert "paid" not in bob.client.get("/billing/ledger.csv").text


def test_budget_form_sets_clears_and_refuses_nonsense(priced: Platform) -> None:
    alice = log_in(priced, "alice")
    assert alice.post("/billing/budget", {"monthly": "250"}).status_code == 303
    user = next(u for u in users.list_users(priced.ctx) if u.name == "alice")
    assert billing.summary(priced.ctx, user).monthly_budget == 250_000_000
    bad = alice.post("/billing/budget", {"monthly": "lots"})
    assert bad.status_code == 422 and "is not a decimal number" in bad.text
    assert alice.post("/billing/budget", {"monthly": ""}).status_code == 303
    assert billing.summary(priced.ctx, user).monthly_budget is None


def test_create_form_shows_the_estimated_price_per_hour(priced: Platform) -> None:
    admin, alice = log_in(priced, "admin"), log_in(priced, "alice")
    price = {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "7.2"}
    assert admin.post("/admin/billing/prices", price).status_code == 200
    form = alice.client.get("/instances/new").text
    assert re.search(r'id="estimate">7\.2 CNY<', form)
    three = alice.client.get("/instances/new/availability?gpu_model=A100-80GB&gpu_count=3").text
    assert re.search(r'id="estimate">21\.6 CNY<', three)
    free = alice.client.get("/instances/new/availability?gpu_model=RTX4090-24GB&gpu_count=1").text
    assert re.search(r'id="estimate">0 CNY<', free)
    create(alice, gpu_model="RTX4090-24GB")
    priced.reconciler.drain()  # one of the two RTX 4090s is taken
    fits = alice.client.get("/instances/new/availability?gpu_model=RTX4090-24GB&gpu_count=1").text
    assert "data-short" not in fits
    waits = alice.client.get("/instances/new/availability?gpu_model=RTX4090-24GB&gpu_count=2").text
    assert 'data-short="queue"' in waits and "Only 1 free now" in waits
    never = alice.client.get("/instances/new/availability?gpu_model=RTX4090-24GB&gpu_count=3").text
    assert 'data-short="too-many"' in never and "No host has 3" in never


def test_bar_chart_scales_to_a_round_maximum() -> None:
    chart = charts.bar_chart([("a", 0), ("b", 30), ("c", 100)], str, width=364, height=130)
    heights = [bar.height for bar in chart.bars]
    assert heights[0] == 0 and heights[2] == 100.0 and heights[1] == 30.0  # top of scale: 100
    assert [tick.label for tick in chart.ticks] == ["0", "50", "100"]
    assert not chart.empty and charts.bar_chart([("x", 0)], str).empty
    assert charts.bar_chart([("x", 7)], str).ticks[-1].label == "10"


def test_without_funds_create_is_an_inline_error_and_start_a_402(
    priced: Platform, clock: FakeClock
) -> None:
    admin, alice = log_in(priced, "admin"), log_in(priced, "alice")
    instance_id = create(alice, name="early", gpu_model="A100-80GB")  # still free
    priced.reconciler.drain()
    assert alice.post(f"/instances/{instance_id}/stop").status_code == 303
    priced.reconciler.drain()
    price = {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "7.2"}
    assert admin.post("/admin/billing/prices", price).status_code == 200
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "late", "image": "", "disk_gb": ""}
    refused = alice.post("/instances", data)
    assert refused.status_code == 422 and 'class="field-error"' in refused.text
    assert "ask an admin for a top-up" in refused.text and 'value="late"' in refused.text
    start = alice.post(f"/instances/{instance_id}/start")
    assert start.status_code == 402 and "Not enough balance" in start.text
    taken = alice.post("/instances", {**data, "name": "early", "gpu_model": "RTX4090-24GB"})
    assert taken.status_code == 422 and "already have an instance named" in taken.text


def test_the_topup_form_names_no_user_until_the_admin_chooses_one(priced: Platform) -> None:
    admin = log_in(priced, users.ADMIN_NAME)
    page = admin.client.get("/admin/billing").text
    form = page[page.index('id="topup-form"') :]
    select = form[form.index('<select name="user" required>') : form.index("</select>")]
    assert '<option value="" selected disabled>' in select
    assert 'value="admin" selected' not in select and 'value="alice" selected' not in select


def test_the_balance_shows_its_runway_and_an_empty_chart_no_scale(
    priced: Platform, clock: FakeClock
) -> None:
    admin, alice = log_in(priced, "admin"), log_in(priced, "alice")
    empty = alice.client.get("/billing").text
    spend_chart = empty.split('id="spend-chart"')[1].split("</svg>")[0]
    assert 'class="grid"' not in spend_chart and "0.000001" not in spend_chart
    price = {"kind": "gpu", "gpu_model": "RTX4090-24GB", "amount": "3.6"}
    assert admin.post("/admin/billing/prices", price).status_code == 200
    topup = {"user": "alice", "amount": "36", "key": topup_key(admin)}
    assert admin.post("/admin/billing/topups", topup).status_code == 201
    create(alice, name="burning", gpu_model="RTX4090-24GB", gpu_count="1")
    priced.reconciler.drain()
    runway = alice.client.get("/billing").text.split('id="runway">')[1].split("</span>")[0]
    assert runway == "lasts about 10 h 00 min at this rate"  # 36 at 3.6 an hour


def test_the_operator_sees_every_wallet_and_the_latest_topups(priced: Platform) -> None:
    admin, alice = log_in(priced, users.ADMIN_NAME), log_in(priced, "alice")
    topup = {"user": "alice", "amount": "12.345678", "key": topup_key(admin), "note": "grant"}
    assert admin.post("/admin/billing/topups", topup).status_code == 201
    page = admin.client.get("/admin/billing").text
    wallets = page.split('id="wallets"')[1].split("</table>")[0]
    alice_row = wallets.split('data-wallet="alice"')[1].split("</tr>")[0]
    assert 'title="12.345678"' in alice_row and ">12.35<" in alice_row
    bob_row = wallets.split('data-wallet="bob"')[1].split("</tr>")[0]
    assert ">0.00<" in bob_row  # never topped up
    topups = page.split('id="topups"')[1].split("</table>")[0]
    assert "alice" in topups and ">12.35<" in topups and "grant" in topups
    assert alice.client.get("/admin/billing").status_code == 403
