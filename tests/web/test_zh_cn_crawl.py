"""Every page of the console in zh-CN, as a user and as an admin, with data on
them: no English left in what a reader sees (text, tooltips, placeholders),
outside the names, units and identifiers of ALLOWED and the data's own names.

Run after adding strings: a message without a zh-CN entry fails here with the
page, the words and the text around them. The crawl follows every link from
the dashboard, at a desktop width and at a phone's, which must also fit."""

from __future__ import annotations

import re
from collections import deque
from urllib.parse import urlsplit

from playwright.sync_api import Page, expect

from tests.support.web import PASSWORD
from tests.web.browser import chromium, serve
from tests.web.scene import TOO_NEW, Scene, scene  # noqa: F401

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Names, units and identifiers that read the same in Chinese.
ALLOWED = frozenset(
    w.lower()
    for w in (
        "GPU",
        "GPUs",
        "CPU",
        "CUDA",
        "cuDNN",
        "SSH",
        "API",
        "CSV",
        "UUID",
        "NVML",
        "NUMA",
        "MTBF",
        "Xid",
        "ID",
        "GB",
        "GiB",
        "MiB",
        "KiB",
        "KB",
        "MB",
        "TB",
        "B",
        "UTC",
        "CNY",
        "Python",
        "PyTorch",
        "TensorFlow",
        "JAX",
        "Ubuntu",
        "Debian",
        "bookworm",
        "VS",
        "Code",
        "Remote-SSH",
        "Jupyter",
        "gpudock",
        "Docker",
        "Dockerfile",
        "OS",
        "PTX",
        "JIT",
        "NVIDIA",
        "English",
        "NVLink",
        "PCIe",
        "HBM",
        "Linux",
        "ssh",
        "scp",
        "rsync",
        "shell",
        "Webhook",
        "X-Gpudock-Signature",
        "JupyterLab",
        "TensorBoard",
        "app",  # the example service name in the publish form
    )
)
# Loaded, and every fragment a page loads after it (hx-trigger="load": the
# placeholder is swapped out by what it loads) swapped in and settled; a fixed
# wait for the network to go quiet costs half a second a page.
_SETTLED = """() => document.readyState === "complete" && !document.querySelector(
  '[hx-trigger="load"], .htmx-request, .htmx-swapping, .htmx-settling')"""
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
# Text a reader sees, the tooltips and placeholders; <code>, <pre> and inputs hold
# commands, keys and identifiers, which stay as they are.
_VISIBLE_TEXT = """() => {
  const skip = "code, pre, kbd, script, style, datalist, textarea, noscript";
  const out = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest(skip)) { continue; }
    const text = n.textContent.trim();
    if (text) { out.push(text); }
  }
  for (const el of document.querySelectorAll("[title], [placeholder], [aria-label]")) {
    if (el.closest(skip)) { continue; }
    for (const name of ["title", "placeholder", "aria-label"]) {
      const value = el.getAttribute(name);
      if (value) { out.push(value); }
    }
  }
  return out;
}"""


def english_words(texts: list[str], names: frozenset[str]) -> list[str]:
    """'word (in: the text)' for each English word outside ALLOWED and `names`; a
    token with a digit, '/', '_', '.', ':', '@' or '=' is an identifier, not a word."""
    found = []
    for text in texts:
        for token in re.sub(r"`[^`]*`", " ", text).split():  # `commands` stay as they are
            identifier = re.search(r"[\d/_.:@=<>\[\]{}|\\]", token) or token.startswith("-")
            if identifier or token.strip("()'\"").lower() in names:
                continue
            for word in _WORD.findall(token):
                placeholder = len(word) > 1 and word.isupper()  # KEY, AMOUNT in a command
                if not placeholder and word.lower() not in ALLOWED | names:
                    found.append(f"{word!r} (in: {text[:120]!r})")
    return found


def log_in(page: Page, url: str, name: str) -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("a.who")).to_contain_text(name)


def crawl(page: Page, url: str, start: list[str], names: frozenset[str]) -> dict[str, list[str]]:
    """Every console page reachable from `start` → the English words on it."""
    seen: set[str] = set()
    queue = deque(start)
    problems: dict[str, list[str]] = {}
    while queue:
        path = queue.popleft()
        if path in seen:
            continue
        seen.add(path)
        page.goto(url + path)
        page.wait_for_function(_SETTLED)
        words = english_words(page.evaluate(_VISIBLE_TEXT), names)
        if words:
            problems[path] = words
        width = page.evaluate("document.documentElement.scrollWidth")
        viewport = page.viewport_size
        if viewport and width > viewport["width"]:
            problems.setdefault(path, []).append(f"page is {width} px wide")
        for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"):
            parts = urlsplit(href)
            link = parts.path + (f"?{parts.query}" if parts.query else "")
            if href.startswith(url) and not _skipped(parts.path) and link not in seen:
                queue.append(link)
    assert len(seen) >= len(start)
    return problems


def _skipped(path: str) -> bool:
    skipped = ("/static", "/logout", "/login", "/lang/")  # /lang/en would switch language
    return path.startswith(skipped) or path.endswith(".csv")


def test_every_page_in_zh_cn_has_no_english_left(scene: Scene) -> None:  # noqa: F811
    extra = [
        f"/instances/{scene.running}",
        f"/instances/{scene.stopped}",
        f"/instances/{scene.waiting}",
        "/no-such-page",
        "/instances/i-0000000000",
    ]
    with serve(scene.platform) as url, chromium() as browser:
        problems: dict[str, list[str]] = {}
        for viewport in (DESKTOP, PHONE):
            for name in ("alice", "admin"):
                context = browser.new_context(viewport=viewport, locale="zh-CN")
                page = context.new_page()
                log_in(page, url, name)
                for path, words in crawl(page, url, ["/", *extra], scene.names).items():
                    problems[f"{name} {viewport['width']} px {path}"] = words
                context.close()
    report = "\n".join(f"{where}: {', '.join(words[:12])}" for where, words in problems.items())
    assert not problems, "English left on zh-CN pages:\n" + report


def test_zh_cn_tables_keep_their_headers_on_one_line_and_say_he_ji(scene: Scene) -> None:  # noqa: F811
    with serve(scene.platform) as url, chromium() as browser:
        page = browser.new_context(viewport=DESKTOP, locale="zh-CN").new_page()
        log_in(page, url, "alice")
        page.goto(f"{url}/instances/{scene.running}")
        expect(page.locator("#ssh-sessions th").first).to_be_visible()
        lines = page.eval_on_selector_all(
            "#ssh-sessions th, #ssh-sessions td .badge, #ssh-sessions td:last-child",
            """ths => ths.map(th => {
                const range = document.createRange();
                range.selectNodeContents(th);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                return [th.textContent, tops.size];
            })""",
        )
        assert {"已结束", "原因"} <= {text for text, _ in lines}
        assert [text for text, count in lines[:8] if count > 1] == []  # headers, the first badge
        page.goto(f"{url}/billing")
        usage_header = page.locator("#usage thead").inner_text()
        assert "合计" in usage_header and "总数" not in usage_header
        page.goto(f"{url}/instances/{scene.stopped}")
        reason = page.locator("#status-reason").inner_text()
        assert reason == "已关机；数据保留"
        events = page.locator(".timeline").inner_text()
        assert "运行于" in events and "已请求关机" in events
        page.goto(f"{url}/billing")
        assert "60 秒 × 1 × RTX4090-24GB，单价 2.5/小时" in page.locator("#ledger").inner_text()
        page.goto(f"{url}/images")
        mark = page.locator(f'tr[data-image="{TOO_NEW}"] span.bad').first
        assert "需要 NVIDIA 驱动" in (mark.get_attribute("title") or "")
