"""The documentation site offline, in a real browser: the site is built (mkdocs build --strict into a
temporary folder), served on 127.0.0.1 by the test, and opened in headless Chromium
(tests/ui_browser.py) with every request to another host refused, as on a machine with no network,
and recorded. Each page with a diagram (Home and Pipeline) shows it drawn as an SVG, not as its
mermaid source; search finds a known word; and no page asks another host for anything (the site
serves its own pinned mermaid, fetched at set-up by scripts/fetch_mermaid.sh). Screenshots go to
$PEARL_SCREENSHOT_DIR, else run/screenshots/<test>/.

Needs Chromium (scripts/setup.sh installs Debian's when run as root; $PEARL_CHROMIUM names
another): skipped without it, except under CI (env CI set), where that is a failure.
"""
from __future__ import annotations

import contextlib
import functools
import html
import re
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests import test_docs, ui_browser

import local_assets  # docs/hooks/local_assets.py, on the path through test_docs

pytestmark = pytest.mark.timeout(600)

LOCAL = "127.0.0.1"
SEARCH_WORD = "phrase"  # on nearly every page
DIAGRAM = '<pre class="mermaid">'  # how the mermaid fence (mkdocs.yml custom_fences) is built
WAIT_S = 30


# The site built by mkdocs build --strict into a temporary folder: test_docs.py's fixture, built
# once for this module too.
site = test_docs.site


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per file would bury pytest's output
        pass


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on 127.0.0.1 (a free port), stopped when the module's tests end."""
    server = ThreadingHTTPServer((LOCAL, 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://{LOCAL}:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    ui_browser.require_browser()
    with ui_browser.open_browser() as opened:
        yield opened


def offsite(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme not in ("data", "blob", "about") and parts.hostname != LOCAL


def offline_page(browser):
    """A page on which a request to any host but 127.0.0.1 fails at once, as without a network;
    the URLs of such requests (the page's and its workers') are appended to the returned list."""
    page = ui_browser.new_page(browser)
    asked: list[str] = []
    page.context.on("request", lambda request: asked.append(request.url) if offsite(request.url) else None)
    page.context.route(offsite, lambda route: route.abort("internetdisconnected"))
    return page, asked


def heading(page_html: str) -> str:
    return html.unescape(re.search(r"<h1[^>]*>([^<]+)", page_html).group(1)).strip()


def diagram_pages(site: Path) -> dict[str, str]:
    """URL path -> built HTML of every page with a mermaid diagram."""
    pages = {}
    for path in sorted(site.rglob("index.html")):
        text = path.read_text(encoding="utf-8")
        if DIAGRAM in text:
            rel = path.parent.relative_to(site).as_posix()
            pages["" if rel == "." else f"{rel}/"] = text
    return pages


def drawn_diagrams(page) -> list[str]:
    """The SVG (outer HTML) in each diagram that Material has drawn: it replaces the
    <pre class="mermaid"> with a <div class="mermaid"> holding the SVG in a closed shadow root,
    which selectors do not enter, so the DOM is read through the DevTools protocol."""
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
        svgs: list[str] = []

        def walk(node: dict, in_diagram: bool) -> None:
            name = node.get("localName", "")
            attrs = node.get("attributes", [])
            classes = dict(zip(attrs[::2], attrs[1::2])).get("class", "").split()
            if in_diagram and name == "svg":
                svgs.append(cdp.send("DOM.getOuterHTML", {"nodeId": node["nodeId"]})["outerHTML"])
                return
            for child in node.get("children", []) + node.get("shadowRoots", []):
                walk(child, in_diagram or (name == "div" and "mermaid" in classes))

        walk(root, False)
        return svgs
    finally:
        cdp.detach()


def wait_for_diagrams(page, count: int) -> list[str]:
    """The drawn diagrams' SVGs, once there are `count` of them or after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    svgs = drawn_diagrams(page)
    while len(svgs) < count and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        svgs = drawn_diagrams(page)
    return svgs


def test_home_and_pipeline_draw_their_diagrams_offline(browser, served, site, request):
    shots = ui_browser.screenshot_dir(request)
    pages = diagram_pages(site)
    assert {"", "pipeline/"} <= set(pages), f"Home and Pipeline have mermaid diagrams; found them on {sorted(pages)}"
    for path, built in pages.items():
        url, shot = served + path, shots / f"{path.strip('/') or 'home'}.png"
        sources = [html.unescape(s) for s in re.findall(r'<pre class="mermaid"><code>(.*?)</code></pre>', built, re.DOTALL)]
        assert len(sources) == built.count(DIAGRAM)
        page, asked = offline_page(browser)
        try:
            ui_browser.visit(page, url, [heading(built)], shot)
            svgs = wait_for_diagrams(page, len(sources))
            page.screenshot(path=str(shot), full_page=True)
            assert len(svgs) == len(sources), (f"{url}: {len(svgs)} of {len(sources)} diagrams drawn as SVG "
                                               f"after {WAIT_S}s; requests to other hosts: {asked}")
            text = ui_browser.page_text(page)
            for source, svg in zip(sources, svgs):
                kind = source.split()[0]  # flowchart, sequenceDiagram...: the SVG's role names it, or "error"
                assert f'aria-roledescription="{kind}' in svg, f"{url}: not a drawn {kind}: {svg[:500]}"
                assert source.strip().splitlines()[0] not in text, f"{url}: the mermaid source shows"
            assert not asked, f"{url} asked other hosts: {asked}"
        finally:
            page.context.close()


def test_search_finds_a_known_word_offline(browser, served, site, request):
    shots = ui_browser.screenshot_dir(request)
    page, asked = offline_page(browser)
    try:
        ui_browser.visit(page, served, [heading((site / "index.html").read_text(encoding="utf-8"))],
                         shots / "home.png")
        page.locator("input[data-md-component=search-query]").press_sequentially(SEARCH_WORD)
        results = page.locator(".md-search-result__item")
        with contextlib.suppress(PlaywrightTimeout):  # reported below with what the search says
            results.first.wait_for(timeout=WAIT_S * 1000)
        page.screenshot(path=str(shots / "search.png"), full_page=True)
        meta = page.locator(".md-search-result__meta").inner_text()
        assert results.count() > 0, (f"search for {SEARCH_WORD!r}: no results after {WAIT_S}s "
                                     f"(it says {meta!r}); requests to other hosts: {asked}")
        assert SEARCH_WORD in results.first.inner_text().lower()
        assert not asked, f"the search asked other hosts: {asked}"
    finally:
        page.context.close()


def test_the_build_refuses_a_script_from_another_host_or_missing(tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "here.js").write_text("")
    config = SimpleNamespace(site_dir=str(tmp_path), docs_dir="docs", extra_css=["assets/here.js"],
                             extra_javascript=["assets/here.js", "https://cdn.example/mermaid.min.js",
                                               "//cdn.example/x.js", "assets/vendor/missing.js"])
    problems = local_assets.missing_assets(config)
    assert [p.split(": ")[0] for p in problems] == config.extra_javascript[1:]
    config.extra_javascript = ["assets/here.js"]
    assert local_assets.missing_assets(config) == []
    local_assets.on_post_build(config)
    config.extra_css.append("assets/gone.css")
    with pytest.raises(local_assets.PluginError, match="assets/gone.css: not in the site"):
        local_assets.on_post_build(config)
