"""The dashboard in a real browser, watching a real local cluster scale out.

``ecache up`` runs as a subprocess (coordinator and node processes on 127.0.0.1, small
nodes so that a few hundred writes fill one); Debian's Chromium, driven by Playwright
with ``executable_path`` (``playwright install`` is never needed), opens the dashboard;
the test writes until the cluster scales out and watches the page show the launch while
the new node boots, the migration with its progress while it runs, then the new node and
the finished migration. Screenshots land in ``tests/e2e/artifacts/`` for people.

Skipped, with the reason, only when the browser is not there: ``make test`` installs
Debian's ``chromium`` when it runs as root with apt-get.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_or_skip() -> str:
    pytest.importorskip("playwright.async_api", reason="playwright is not installed (dev extra)")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip(
            "Debian's chromium is not installed and could not be: `make test` installs it "
            "with apt-get when run as root (apt-get install -y chromium)"
        )
    return path


def ready_url(log: Path) -> str:
    """The coordinator's URL from the ready line ``ecache up`` writes, or "" before it."""
    for line in log.read_text(errors="replace").splitlines(keepends=True):
        if '"event": "ready"' in line and line.endswith("\n"):
            return str(json.loads(line)["url"])
    return ""


#: A launch takes this long (a stand-in for an instance's boot) and a move sends this
#: many records a second, so both stay in flight for a few of the page's 1 s polls.
BOOT_DELAY = 3.0
MIGRATION_RATE = 40


@contextlib.asynccontextmanager
async def local_cluster(tmp_path: Path, *extra: str) -> AsyncIterator[str]:
    """``ecache up`` with 300-record nodes (and ``extra`` flags); yields its URL; stops it
    by its PID."""
    config = tmp_path / "ecache.toml"
    config.write_text(f"[nodes]\nboot_delay = {BOOT_DELAY}\n")
    log = await asyncio.to_thread(open, tmp_path / "up.log", "wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "up",
        "--config",
        str(config),
        "--no-demo-origin",
        "--port",
        "0",  # the kernel picks a free port; the ready line says which
        "--state-dir",
        str(tmp_path / "state"),
        "--index",
        "sorted",
        "--capacity-records",
        "300",
        "--max-nodes",
        "3",
        "--migration-max-rate",
        str(MIGRATION_RATE),
        *extra,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = ""
    try:
        deadline = time.monotonic() + 30 + BOOT_DELAY
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                assert proc.returncode is None, (tmp_path / "up.log").read_text()
                url = url or ready_url(tmp_path / "up.log")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    if url:
                        async with http.get(url + "/healthz") as resp:
                            if resp.status == 200:
                                break
                assert time.monotonic() < deadline, "ecache up did not become healthy"
                await asyncio.sleep(0.1)
        yield url
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()
        log.close()


async def write_until(url: str, stop: asyncio.Event, limit: int = 20_000) -> int:
    """PUT 200-byte values, each followed by a GET of an earlier key (8 in flight), until
    ``stop`` is set or ``limit`` is reached."""
    written = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

        async def worker(offset: int) -> None:
            nonlocal written
            i = offset
            while not stop.is_set() and written < limit:
                async with http.put(f"{url}/v1/kv/e2e:{i}", data=b"v" * 200) as resp:
                    await resp.read()
                async with http.get(f"{url}/v1/kv/e2e:{i // 2}") as resp:
                    await resp.read()
                written += 1
                i += 8
                if i % 64 == offset:
                    await asyncio.sleep(0.01)  # leave the coordinator time for the page

        await asyncio.gather(*(worker(k) for k in range(8)))
    return written


async def test_the_dashboard_shows_a_scale_out(tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    async with local_cluster(tmp_path) as url, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1366, "height": 860})
            errors: list[str] = []
            foreign: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on(
                "request",
                lambda req: None if req.url.startswith(url) else foreign.append(req.url),
            )
            await page.goto(url + "/")
            await page.wait_for_selector('#nodes tbody tr[data-node="node-1"]', timeout=15_000)
            assert await page.locator("#status").text_content() != "connecting…"
            # Namespaces: the default one at least, with its figures.
            await page.wait_for_selector('#namespaces tbody tr[data-namespace="default"]')

            stop = asyncio.Event()
            writer = asyncio.create_task(write_until(url, stop))
            try:
                # The scaler launches node-2 (the page shows the launch while it boots)
                # and moves half of node-1's bucket to it (shown with its progress while
                # it runs, then as done); the page polls once a second.
                await page.wait_for_selector('#launches li[data-node="node-2"]', timeout=60_000)
                await page.wait_for_selector(
                    '#nodes tbody tr[data-node="node-2"][data-state="launching"]', timeout=5_000
                )
                running = page.locator('#migrations li[data-state="running"]').first
                await running.wait_for(timeout=60_000)
                moving = await running.text_content()
                assert moving is not None and "node-1 → node-2" in moving, moving
                assert await running.locator(".progress").count() == 1
                await page.screenshot(
                    path=str(ARTIFACTS / "dashboard-migrating.png"), full_page=True
                )
                new_row = '#nodes tbody tr[data-node="node-2"][data-state="active"]'
                await page.wait_for_selector(new_row, timeout=60_000)
                await page.wait_for_selector(
                    '#events li[data-kind="migration_done"]', timeout=30_000
                )
            finally:
                stop.set()
                written = await writer
            assert written > 0
            # Finished moves are listed too (a later one, to node-3, may be under way).
            done = page.locator('#migrations li[data-state="done"]', has_text="node-1 → node-2")
            await done.first.wait_for(timeout=5_000)
            assert await page.locator('#events li[data-kind="launched"]').count() >= 2
            ring_paths = await page.locator('#ring path[data-node="node-2"]').count()
            assert ring_paths >= 1
            await page.wait_for_timeout(1500)  # one more poll, so the charts have points
            await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            assert errors == [], errors
            assert foreign == [], f"the page fetched from another host: {foreign}"
        finally:
            await browser.close()


TOKEN = "dashboard-token-0123456789abcdef"


async def test_the_dashboard_of_a_cluster_with_a_token(tmp_path: Path) -> None:
    """``ecache up --token-file``: the page's files load without the token; its API
    calls carry it, taken from ``/#token=...`` (then dropped from the address bar) or
    asked for once; the token never appears in a request's URL."""
    chromium = chromium_or_skip()
    from playwright.async_api import async_playwright

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with (
        local_cluster(tmp_path, "--token-file", str(token_file)) as url,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            urls: list[str] = []
            # From the address: the fragment is never sent, and is removed at once.
            page = await browser.new_page()
            page.on("request", lambda req: urls.append(req.url))
            await page.goto(f"{url}/#token={TOKEN}")
            await page.wait_for_selector('#nodes tbody tr[data-node="node-1"]', timeout=15_000)
            assert page.url == url + "/"
            # Asked once: the page gets 401, prompts, then shows the cluster.
            asked = await browser.new_page()
            asked.on("request", lambda req: urls.append(req.url))
            prompts: list[str] = []

            async def answer(dialog: Any) -> None:
                prompts.append(dialog.message)
                await dialog.accept(TOKEN)

            asked.on("dialog", answer)
            await asked.goto(url + "/")
            await asked.wait_for_selector('#nodes tbody tr[data-node="node-1"]', timeout=15_000)
            assert len(prompts) == 1 and "token" in prompts[0]
            # Found in review: a mistyped token was kept and never asked for again; a
            # /#token=... opened in the same tab (no reload) was ignored; a stray % in it
            # stopped the page. Now a refused token is asked for again, the fragment is
            # taken when it changes, and a malformed one is said in the status.
            typo = await browser.new_page()
            typed: list[str] = []

            async def mistype(dialog: Any) -> None:
                typed.append(dialog.message)
                await dialog.accept("not-the-token" if len(typed) == 1 else TOKEN)

            typo.on("dialog", mistype)
            await typo.goto(url + "/")
            await typo.wait_for_selector('#nodes tbody tr[data-node="node-1"]', timeout=15_000)
            assert len(typed) == 2
            later = await browser.new_page()
            later.on("dialog", lambda dialog: asyncio.ensure_future(dialog.dismiss()))
            await later.goto(url + "/#token=%E0%A4%A")
            await later.wait_for_function(
                "document.querySelector('#status').textContent.includes('malformed')",
                timeout=15_000,
            )
            await later.goto(f"{url}/#token={TOKEN}")  # the same page: a fragment change
            await later.wait_for_selector('#nodes tbody tr[data-node="node-1"]', timeout=15_000)
            assert later.url == url + "/"
            # The footer's raw links: a plain link cannot carry the token (401, review);
            # a click fetches with it and shows the answer in a new tab.
            async with page.expect_popup() as opened:
                await page.click('footer a[href="/v1/cluster"]')
            raw = await opened.value
            await raw.wait_for_function(
                "document.body && document.body.innerText.includes('\"epoch\"')", timeout=15_000
            )
            assert "unauthorized" not in await raw.inner_text("body")
            await raw.close()
            # A node that stops answering shows as suspect, not active (review).
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                aiohttp.ClientSession(headers=auth) as http,
                http.get(url + "/v1/cluster") as resp,
            ):
                pid = int((await resp.json())["nodes"][0]["ref"])
            os.kill(pid, signal.SIGSTOP)
            try:
                await page.wait_for_selector(
                    '#nodes tbody tr[data-node="node-1"][data-state="suspect"]', timeout=20_000
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            await page.wait_for_selector(
                '#nodes tbody tr[data-node="node-1"][data-state="active"]', timeout=20_000
            )
            # Without it the API refuses; the page's own files need none.
            async with aiohttp.ClientSession() as http:
                async with http.get(url + "/v1/cluster") as resp:
                    assert resp.status == 401
                async with http.get(url + "/dashboard/dashboard.js") as resp:
                    assert resp.status == 200
            assert urls and not any(TOKEN in u for u in urls)
        finally:
            await browser.close()
