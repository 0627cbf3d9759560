"""A share of one GPU in the console: the create form's choice with its price,
the instance and GPU pages showing shares, and the wait queue on the instance."""

from __future__ import annotations

import re

import pytest

from gpudock.platform import Platform
from tests.support.web import Browser, log_in
from tests.web.test_pages import create

SHARE = {"gpu_mode": "share", "share_unit": "fraction"}


def availability(browser: Browser, **query: str) -> str:
    fields = {"gpu_model": "A100-80GB", "gpu_count": "1", **query}
    response = browser.client.get("/instances/new/availability", params=fields)
    assert response.status_code == 200
    return response.text


def test_the_share_price_is_its_part_of_the_gpus(console: Platform) -> None:
    admin, alice = log_in(console, "admin"), log_in(console, "alice")
    price = {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "7.2"}
    assert admin.post("/admin/billing/prices", price).status_code == 200
    quarter = availability(alice, **SHARE, share="0.25")
    assert re.search(r'id="estimate">1\.8 CNY<', quarter)
    assert 'data-share="250"' in quarter and "20 GiB of its GPU memory" in quarter
    by_memory = availability(alice, gpu_mode="share", share_unit="gb", share="40")
    assert re.search(r'id="estimate">3\.6 CNY<', by_memory)  # 40 of 80 GB: half the card
    whole = availability(alice, gpu_mode="whole", share="0.25", gpu_count="2")
    assert re.search(r'id="estimate">14\.4 CNY<', whole)  # the share field is not used


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"share": "1.5"}, "ask for whole GPUs"),
        ({"share": "0"}, "between 0 and 1"),
        ({"share": "half"}, "such as 0.25"),
        ({"share": "80", "share_unit": "gb"}, "ask for a whole GPU"),
    ],
)
def test_a_share_the_server_would_refuse_says_why_before_it_is_sent(
    console: Platform,
    query: dict[str, str],
    problem: str,
) -> None:
    alice = log_in(console, "alice")
    shown = availability(alice, **{**SHARE, **query})
    assert 'data-short="share-problem"' in shown and problem in shown


def test_a_share_made_in_the_form_shows_on_its_pages(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    first = create(alice, name="half", **SHARE, share="0.5")
    create(alice, name="quarter", gpu_mode="share", share_unit="gb", share="20")
    console.reconciler.drain()
    page = alice.client.get(f"/instances/{first}").text
    assert "0.5 × A100-80GB" in page and 'id="share-limit">40 GiB<' in page
    assert "0.25 × A100-80GB" in alice.client.get("/instances/rows").text
    dashboard = alice.client.get("/").text
    assert 'data-share-free="3250">3.25<' in dashboard  # 4 cards, three quarters of one taken
    assert 'data-largest-share="1000">1<' in dashboard
    hosts = admin.client.get("/admin/hosts").text
    assert 'data-share="500">0.5 · <a href="/instances/' in hosts and ">half<" in hosts
    assert "0.25 of the card free for shares" in hosts


def test_a_bad_share_in_the_form_is_shown_at_its_field(console: Platform) -> None:
    alice = log_in(console, "alice")
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "", "image": "", "disk_gb": ""}
    response = alice.post("/instances", {**data, **SHARE, "share": "2"})
    assert response.status_code == 422
    assert 'data-error-for="gpu_share"' in response.text and "ask for whole GPUs" in response.text
    assert 'value="2"' in response.text and 'value="share" data-choice="share" checked' in (
        response.text
    )


def test_a_waiting_instance_shows_its_place_in_the_queue(console: Platform) -> None:
    alice = log_in(console, "alice")
    create(alice, name="big", gpu_model="RTX4090-24GB", gpu_count="2")
    console.reconciler.drain()
    waiting = create(alice, name="next", gpu_model="RTX4090-24GB", **SHARE, share="0.5")
    console.reconciler.tick()
    live = alice.client.get(f"/instances/{waiting}/live").text
    assert "1 of 1 waiting for these GPUs" in live and "Estimate: unknown" in live
