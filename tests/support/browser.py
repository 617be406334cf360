"""A real browser for the tests: Debian's headless Chromium driven by Playwright.

Playwright (the Python package, from PyPI) drives ``/usr/bin/chromium`` (``apt-get install
chromium``) through ``executable_path``: no browser is downloaded (``playwright install`` is never
run). Each :func:`browser` is one Chromium process with a new, empty profile directory, always
closed, with everything it spawned, when the block ends; every step has a time limit.

The helpers are async (the tests that need a browser also hold SDK clients on an event loop); a
synchronous test calls ``asyncio.run(authorize(...))``.

    async with browser(tmp_path) as b:
        page = await b.authorize(url, "alice", authserver.password("alice"))
        assert page.url.startswith(callback)

:meth:`Browser.authorize` knows the test authorization server's sign-in and consent pages by
their element ids (`tests/servers/authserver/pages.mjs`): it fills whichever appears until a page
that is neither, and returns that page.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tests.conftest import require

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext
    from playwright.async_api import Page as PlaywrightPage

CHROMIUM = Path(os.environ.get("MCP_EDGE_CHROMIUM") or "/usr/bin/chromium")
#: As the machine's notes say Chromium runs here: as root, without a GPU, and never calling home.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",  # everything the tests browse is on loopback
)
TIMEOUT = 30.0  # seconds, per navigation or action (a loaded machine: a page takes well under 1 s)
MAX_STEPS = 8  # sign-in and consent pages filled before giving up

LOGIN_FORM = "#login-form"
CONSENT_FORM = "#consent-form"


def require_browser() -> Path:
    """Chromium's path; skips without it or Playwright (fails under REQUIRE_ALL=1, as in CI)."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        require(False, "the playwright package is missing: uv sync --group dev")
    found = CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)
    require(
        found, f"no Chromium at {CHROMIUM}: apt-get install chromium (or set MCP_EDGE_CHROMIUM)"
    )
    return CHROMIUM


@dataclass(frozen=True)
class BrowserPage:
    """Where the browser ended up: the page's URL, HTTP status, title and visible text, every URL
    the main frame requested on the way (redirects included), and what the helper filled."""

    url: str
    status: int | None
    title: str
    text: str
    history: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium with a fresh profile (one user's browser: its cookies persist across
    the calls made on it)."""

    def __init__(self, context: BrowserContext, profile: Path, timeout: float) -> None:
        self.context = context
        #: The profile directory given to Chromium (``--user-data-dir``).
        self.profile = profile
        self.timeout = timeout

    async def _page(self) -> PlaywrightPage:
        pages = self.context.pages
        return pages[0] if pages else await self.context.new_page()

    async def open(self, url: str) -> BrowserPage:
        """Go to ``url``, follow its redirects, and return the page it ends on."""
        page = await self._page()
        history = _record(page)
        response = await page.goto(url, wait_until="load")
        return await _snapshot(page, response.status if response else None, history, [])

    async def authorize(
        self,
        url: str,
        user: str,
        password: str,
        *,
        consent: Literal["approve", "deny"] = "approve",
        max_steps: int = MAX_STEPS,
    ) -> BrowserPage:
        """Open ``url`` and sign ``user`` in at the test authorization server's pages: fill the
        sign-in form, answer the consent (``approve`` or ``deny``), follow the redirects, and
        return the first page that is neither. A refused sign-in returns the sign-in page with
        its ``#error``."""
        page = await self._page()
        history = _record(page)
        steps: list[str] = []
        response = await page.goto(url, wait_until="load")
        status = response.status if response else None
        for _ in range(max_steps):
            if await page.locator(LOGIN_FORM).count():
                if steps and steps[-1] == f"login {user}" and await page.locator("#error").count():
                    break  # the password was refused: that page is the answer
                await page.fill("#login", user)
                await page.fill("#password", password)
                steps.append(f"login {user}")
                status = await _submit(page, "#sign-in")
            elif await page.locator(CONSENT_FORM).count():
                steps.append(f"consent {consent}")
                status = await _submit(page, "#approve" if consent == "approve" else "#deny")
            else:
                return await _snapshot(page, status, history, steps)
        return await _snapshot(page, status, history, steps)

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the current page (to look at when a flow went wrong)."""
        page = await self._page()
        await page.screenshot(path=str(path), full_page=True)
        return path


def _record(page: PlaywrightPage) -> list[str]:
    """Collect every URL the main frame requests from now on (redirect hops included)."""
    history: list[str] = []

    def on_request(request: object) -> None:
        from playwright.async_api import Request

        assert isinstance(request, Request)
        if request.is_navigation_request() and request.frame == page.main_frame:
            history.append(request.url)

    page.on("request", on_request)
    return history


async def _submit(page: PlaywrightPage, button: str) -> int | None:
    """Click a form's submit button and wait for the page it leads to (after its redirects)."""
    async with page.expect_navigation(wait_until="load") as navigation:
        await page.click(button)
    response = await navigation.value
    return response.status if response else None


async def _snapshot(
    page: PlaywrightPage, status: int | None, history: list[str], steps: list[str]
) -> BrowserPage:
    text = await page.locator("body").inner_text() if await page.locator("body").count() else ""
    return BrowserPage(
        url=page.url,
        status=status,
        title=await page.title(),
        text=text,
        history=list(history),
        steps=steps,
    )


@asynccontextmanager
async def browser(tmp: Path | None = None, *, timeout: float = TIMEOUT) -> AsyncIterator[Browser]:
    """A headless Chromium for the block, its profile a new empty directory under ``tmp`` (else a
    temporary one, removed after), ``timeout`` seconds for each navigation and action. Closed,
    with its children, however the block ends."""
    chromium = require_browser()
    from playwright.async_api import async_playwright

    made = tmp is None
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp))
    try:
        async with async_playwright() as playwright:
            context = await asyncio.wait_for(
                playwright.chromium.launch_persistent_context(
                    str(profile),
                    executable_path=str(chromium),
                    headless=True,
                    args=list(CHROMIUM_ARGS),
                    timeout=timeout * 1000,
                ),
                timeout * 2,
            )
            try:
                context.set_default_timeout(timeout * 1000)
                context.set_default_navigation_timeout(timeout * 1000)
                yield Browser(context, profile, timeout)
            finally:
                await asyncio.wait_for(context.close(), timeout)
    finally:
        if made:
            shutil.rmtree(profile, ignore_errors=True)


async def authorize(
    url: str,
    user: str,
    password: str,
    *,
    tmp: Path | None = None,
    consent: Literal["approve", "deny"] = "approve",
    timeout: float = TIMEOUT,
) -> BrowserPage:
    """:meth:`Browser.authorize` in a browser of its own, closed before this returns."""
    async with browser(tmp, timeout=timeout) as b:
        return await b.authorize(url, user, password, consent=consent)
