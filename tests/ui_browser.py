"""Look at the Prefect UI with headless Chromium, for the browser tests.

Playwright's sync API drives Debian's Chromium (`/usr/bin/chromium`, installed by
scripts/setup.sh; `$PEARL_CHROMIUM` names another binary) through its executable path:
`playwright install` is never run, no browser is downloaded.

    with open_browser() as browser:
        page = new_page(browser)
        visit(page, flow_run_url(stack.ui_url, run_id), ["my-run-name"], shots / "run.png")

A server with an auth string (every test server: tests/prefect_stack.py) shows a login page
first: `login(page, base, auth_string, ...)` signs the page's context in, for both UIs.

The Prefect UI is a single-page app (the Vue "v1" UI at the server's root, the React "v2"
UI under /v2, same relative routes): a page is loaded when the texts it must show are
there, not when the document has loaded, so `visit` waits for the texts.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

DEFAULT_CHROMIUM = "/usr/bin/chromium"

# Headless, no sandbox (root in CI), no GPU, and none of Chromium's own traffic (QUIC,
# component updates, sync, field trials...): on this closed network those connections
# are refused and only slow the browser down.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

VIEWPORT = {"width": 1440, "height": 1000}


# --- the browser ---------------------------------------------------------------------------
def chromium_path() -> str:
    """The Chromium binary: $PEARL_CHROMIUM, else Debian's /usr/bin/chromium."""
    return os.environ.get("PEARL_CHROMIUM") or DEFAULT_CHROMIUM


def browser_available() -> bool:
    """Whether the Chromium binary and the Python playwright package are both there."""
    path = chromium_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return False
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def open_browser(timeout_s: float = 60) -> Iterator[Browser]:
    """A headless Chromium `playwright.sync_api.Browser`, closed (with the Playwright
    driver) when the block ends, also when it raises.

    Each launch gets a fresh temporary profile (Playwright's own `--user-data-dir`,
    removed on close): `launch` refuses a `--user-data-dir` in `args`.
    """
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if not browser_available():
        raise RuntimeError(f"no Chromium at {path} (or no playwright package): run scripts/setup.sh "
                           "as root, or set PEARL_CHROMIUM=/path/to/chromium")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS,
                                     timeout=timeout_s * 1000)
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):
                browser.close()
    finally:
        pw.stop()


def new_page(browser: Browser, viewport: dict | None = None) -> Page:
    """A page in a context of its own (its own cookies and storage), in a big viewport."""
    context = browser.new_context(viewport=viewport or VIEWPORT)
    return context.new_page()


# --- the Prefect UI's pages ----------------------------------------------------------------
# Routes of prefect 3.8.8's UI (prefect/server/ui/assets/index-*.js, `workspace.*` routes;
# ui-v2 has the same paths under /v2). `base` is the server's root, e.g. http://127.0.0.1:4200.
def ui_base(server_url: str, ui: str = "v1") -> str:
    """The root of one of the server's two UIs: v1 (Vue) at "/", v2 (React) at "/v2"."""
    server_url = server_url.rstrip("/")
    return server_url if ui == "v1" else f"{server_url}/v2"


def runs_url(base: str) -> str:
    """The Runs page (the sidebar's Runs): the latest flow runs."""
    return f"{base.rstrip('/')}/runs"


def flow_run_url(base: str, flow_run_id) -> str:
    return f"{base.rstrip('/')}/runs/flow-run/{flow_run_id}"


def task_run_url(base: str, task_run_id) -> str:
    return f"{base.rstrip('/')}/runs/task-run/{task_run_id}"


def artifacts_url(base: str) -> str:
    return f"{base.rstrip('/')}/artifacts"


def artifact_key_url(base: str, key: str) -> str:
    """The page of an artifact key: its latest version, rendered, and its history."""
    return f"{base.rstrip('/')}/artifacts/key/{quote(key, safe='')}"


def artifact_url(base: str, artifact_id) -> str:
    """The page of one artifact (one version of a key)."""
    return f"{base.rstrip('/')}/artifacts/artifact/{artifact_id}"


def artifact_card(page: Page, base: str, artifact):
    """The card of `artifact` in a list of artifacts shown (a run's Artifacts tab): a link to its
    page in v1, to its key's page in v2."""
    paths = [urlsplit(artifact_url(base, artifact.id)).path, urlsplit(artifact_key_url(base, artifact.key)).path]
    return page.locator(", ".join(f'a[href="{p}"]' for p in paths))


def open_artifact(page: Page, base: str, artifact, expect_texts: list[str], screenshot: Path) -> str:
    """From a list of artifacts shown (a run's Artifacts tab), open `artifact` as a person does: its
    card, then in v2, where the card leads to the key's page, the version's link there (the id's
    first 8 characters). The artifact's page must show `expect_texts`."""
    card = artifact_card(page, base, artifact).first
    if urlsplit(artifact_url(base, artifact.id)).path == card.get_attribute("href"):
        return click(page, card, expect_texts, screenshot, url=artifact_url(base, artifact.id))
    key_page = screenshot.with_name(f"{screenshot.stem}-key{screenshot.suffix}")
    click(page, card, [artifact.key, f"Created {artifact.key}"], key_page, url=artifact_key_url(base, artifact.key))
    return click(page, link(page, str(artifact.id)[:8]), expect_texts, screenshot, url=artifact_url(base, artifact.id))


def login_url(base: str) -> str:
    return f"{base.rstrip('/')}/login"


def login(page: Page, base: str, auth_string: str, screenshot: Path, timeout_s: float = 60) -> None:
    """Sign in on the UI's login page as a person does: type the auth string, press Login.

    Both UIs keep it in the origin's localStorage (`prefect-password`), so one login serves
    v1 and v2 in this page's context. Fails, with the page's state, when the UI stays on the
    login page or shows no Login form.
    """
    visit(page, login_url(base), ["Login"], screenshot, settle_s=0)
    page.locator("input[type=password]").fill(auth_string)
    page.locator("form button[type=submit]").click()
    try:
        page.wait_for_url(lambda url: "/login" not in url, timeout=timeout_s * 1000)
    except Exception as exc:  # noqa: BLE001 - reported with what the page shows
        page.screenshot(path=str(screenshot), full_page=True)
        raise AssertionError(f"{login_url(base)}: still on the login page after {timeout_s:g}s ({exc}):\n"
                             f"{page_text(page)[:2000]}") from None


def each_ui(browser: Browser, server_url: str, auth_string: str, shots: Path) -> Iterator[tuple[Page, str, Path]]:
    """For each of the server's two UIs (v1 at its root; v2 under /v2, where the root sends a browser
    with no saved preference): a page of its own context, signed in on that UI's login page, the UI's
    root, and the UI's screenshot folder (`shots`/v1, `shots`/v2)."""
    for ui in ("v1", "v2"):
        page = new_page(browser)
        base = ui_base(server_url, ui)
        login(page, base, auth_string, shots / ui / "login.png")
        yield page, base, shots / ui


def open_run(page: Page, base: str, run, expect_texts: list[str], screenshot_dir: Path) -> str:
    """The Runs page lists `run` (a flow run): its name there leads to the run's page, which shows
    `expect_texts`."""
    visit(page, runs_url(base), [run.name], screenshot_dir / "runs.png")
    return click(page, link(page, run.name), [run.name, *expect_texts], screenshot_dir / f"run-{run.name}.png",
                 url=flow_run_url(base, run.id))


# --- looking at a page ---------------------------------------------------------------------
def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def page_text(page: Page) -> str:
    """The page's visible text (`document.body.innerText`), '' while there is no body."""
    try:
        return page.evaluate("() => document.body ? document.body.innerText : ''") or ""
    except Exception:  # navigating: the execution context went away
        return ""


def visit(page: Page, url: str, expect_texts: list[str], screenshot: Path, timeout_s: float = 60,
          settle_s: float = 5) -> str:
    """Load `url`, wait until every one of `expect_texts` shows in the page's visible text
    (whitespace-insensitive), then up to `settle_s` for the network to go quiet (the rest
    of the page loading), save a full-page screenshot, return the visible text.

    On failure (a text missing after `timeout_s`, or the page not loading) the screenshot
    is still saved and an AssertionError says which texts are missing, with the page's
    text, console errors, uncaught exceptions and failed or 4xx/5xx requests.
    """
    return _shown(page, url, lambda: page.goto(url, wait_until="domcontentloaded", timeout=timeout_s * 1000),
                  expect_texts, screenshot, timeout_s, settle_s)


def click(page: Page, target, expect_texts: list[str], screenshot: Path, url: str | None = None,
          timeout_s: float = 60, settle_s: float = 5) -> str:
    """Click `target` (a Locator: a link, a tab) on the page shown, as a person does, then check
    the page as `visit` does; with `url`, the click must lead there (a link's destination)."""
    def go():
        target.click(timeout=timeout_s * 1000)
        if url is not None:  # the UI may add a query (v2: ?tab=Logs)
            page.wait_for_url(lambda at: at.split("?", 1)[0] == url, wait_until="commit", timeout=timeout_s * 1000)

    return _shown(page, url or f"{page.url} (after clicking {target})", go, expect_texts, screenshot, timeout_s,
                  settle_s)


def tab(page: Page, name: str):
    """A tab of the page shown, by its label: a button in v1 (Prefect's UI library), role tab in v2."""
    label = re.compile(rf"^\s*{re.escape(name)}\s*$")
    return page.locator("[role=tab], button.p-tabs__tab, .p-tab").filter(has_text=label).first


def link(page: Page, text: str):
    """The first link of the page shown whose text is `text`."""
    return page.get_by_role("link", name=text, exact=True).first


def table_row(page: Page, cell: str):
    """The rows of the tables shown that have a cell whose text is `cell` (v1's cells have no role)."""
    exact = re.compile(rf"^\s*{re.escape(cell)}\s*$")
    return page.locator("tr", has=page.locator("td").filter(has_text=exact))


def assert_image(page: Page, alt: str) -> None:
    """An image of the page shown, by its alt text, is there and loaded (a markdown figure rendered)."""
    img = page.locator(f'img[alt="{alt}"]')
    assert img.count() == 1, f"{page.url}: {img.count()} images with alt {alt!r}"
    assert img.evaluate("e => e.complete && e.naturalWidth > 0"), f"{page.url}: the image {alt!r} did not load"


def _shown(page: Page, url: str, load, expect_texts: list[str], screenshot: Path, timeout_s: float,
           settle_s: float) -> str:
    """`load()` (a navigation or a click), then `visit`'s wait, screenshot and report, `url` naming the page."""
    screenshot = Path(screenshot)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []

    def on_console(msg):
        if msg.type == "error":
            problems.append(f"console error: {msg.text[:300]}")

    def on_pageerror(exc):
        problems.append(f"page error: {str(exc)[:300]}")

    def on_requestfailed(request):
        problems.append(f"request failed: {request.method} {request.url} ({request.failure})")

    def on_response(response):
        if response.status >= 400:
            problems.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    handlers = {"console": on_console, "pageerror": on_pageerror,
                "requestfailed": on_requestfailed, "response": on_response}
    for event, handler in handlers.items():
        page.on(event, handler)
    wanted = {t: _norm(t) for t in expect_texts}
    missing = list(expect_texts)
    text = ""
    error = None
    try:
        deadline = time.monotonic() + timeout_s
        try:
            load()
        except Exception as exc:  # noqa: BLE001 - reported below with the page's state
            error = f"loading failed: {exc}"
        while error is None:
            text = page_text(page)
            flat = _norm(text)
            missing = [t for t, n in wanted.items() if n not in flat]
            if not missing or time.monotonic() > deadline:
                break
            page.wait_for_timeout(250)
        if not missing and not error and settle_s > 0:
            with contextlib.suppress(Exception):  # a page that keeps polling never idles
                page.wait_for_load_state("networkidle", timeout=settle_s * 1000)
        text = page_text(page) or text
    finally:
        shot_error = None
        try:
            page.screenshot(path=str(screenshot), full_page=True, timeout=30_000)
        except Exception as exc:  # noqa: BLE001
            shot_error = f"(screenshot failed: {exc})"
        for event, handler in handlers.items():
            with contextlib.suppress(Exception):
                page.remove_listener(event, handler)

    if missing or error:
        lines = [f"{url}: {error}" if error else
                 f"{url}: after {timeout_s:g}s, missing {missing!r} (found: "
                 f"{[t for t in expect_texts if t not in missing]!r})"]
        try:
            lines.append(f"title: {page.title()!r}, url now: {page.url}")
        except Exception:  # noqa: BLE001
            pass
        lines.append(f"screenshot: {screenshot} {shot_error or ''}".rstrip())
        if problems:
            lines.append("browser problems:\n  " + "\n  ".join(dict.fromkeys(problems)))
        lines.append(f"visible text (first 3000 chars):\n{text[:3000]}")
        raise AssertionError("\n".join(lines))
    if shot_error:
        raise AssertionError(f"{url}: {shot_error}")
    return text


# --- for the tests that use it ------------------------------------------------------------
def require_browser() -> None:
    """Skip without Chromium (or playwright); under CI (env CI set) that is a failure."""
    import pytest

    if browser_available():
        return
    msg = (f"no Chromium at {chromium_path()} (or no playwright package): "
           "run `bash scripts/setup.sh` as root, or set PEARL_CHROMIUM=/path/to/chromium")
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def screenshot_dir(request) -> Path:
    """$PEARL_SCREENSHOT_DIR, else run/screenshots/<test name>/ in the checkout (git-ignored)."""
    given = os.environ.get("PEARL_SCREENSHOT_DIR")
    path = Path(given) if given else Path(__file__).resolve().parents[1] / "run" / "screenshots" / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path
