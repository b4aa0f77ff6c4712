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
ONE_PAGE_WORD, ONE_PAGE_FILE = "ifGenerationMatch", "operating.html"  # a word the search finds on one page only
MIN_LABEL_PX = 12  # a diagram's labels read at this size or more


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
    return parts.scheme not in ("data", "blob", "about", "file") and parts.hostname != LOCAL


def offline_page(browser, viewport: dict | None = None):
    """A page on which a request to any host but 127.0.0.1 (or a file) fails at once, as without a
    network; the URLs of such requests (the page's and its workers') are appended to the returned list."""
    page = ui_browser.new_page(browser, viewport)
    asked: list[str] = []
    page.context.on("request", lambda request: asked.append(request.url) if offsite(request.url) else None)
    page.context.route(offsite, lambda route: route.abort("internetdisconnected"))
    return page, asked


def heading(page_html: str) -> str:
    return html.unescape(re.search(r"<h1[^>]*>([^<]+)", page_html).group(1)).strip()


def diagram_pages(site: Path) -> dict[str, str]:
    """URL path -> built HTML of every page with a mermaid diagram (pages end in .html: the offline
    plugin turns directory URLs off)."""
    pages = {}
    for path in sorted(site.rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        if DIAGRAM in text:
            rel = path.relative_to(site).as_posix()
            pages["" if rel == "index.html" else rel] = text
    return pages


def drawn_diagrams(page, measure: bool = False) -> list:
    """The SVG (outer HTML) in each diagram that Material has drawn: it replaces the
    <pre class="mermaid"> with a <div class="mermaid"> holding the SVG in a closed shadow root,
    which selectors do not enter, so the DOM is read through the DevTools protocol. With
    `measure`, each is (outer HTML, the SVG's drawn width in CSS pixels)."""
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
        svgs: list = []

        def walk(node: dict, in_diagram: bool) -> None:
            name = node.get("localName", "")
            attrs = node.get("attributes", [])
            classes = dict(zip(attrs[::2], attrs[1::2])).get("class", "").split()
            if in_diagram and name == "svg":
                svg = cdp.send("DOM.getOuterHTML", {"nodeId": node["nodeId"]})["outerHTML"]
                if measure:
                    svg = (svg, cdp.send("DOM.getBoxModel", {"nodeId": node["nodeId"]})["model"]["width"])
                svgs.append(svg)
                return
            for child in node.get("children", []) + node.get("shadowRoots", []):
                walk(child, in_diagram or (name == "div" and "mermaid" in classes))

        walk(root, False)
        return svgs
    finally:
        cdp.detach()


def wait_for_diagrams(page, count: int, measure: bool = False) -> list:
    """The drawn diagrams' SVGs (drawn_diagrams), once there are `count` of them or after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    svgs = drawn_diagrams(page, measure)
    while len(svgs) < count and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        svgs = drawn_diagrams(page, measure)
    return svgs


def test_home_and_pipeline_draw_their_diagrams_offline(browser, served, site, request):
    shots = ui_browser.screenshot_dir(request)
    pages = diagram_pages(site)
    assert {"", "pipeline.html"} <= set(pages), f"Home and Pipeline have mermaid diagrams; found them on {sorted(pages)}"
    for path, built in pages.items():
        url, shot = served + path, shots / f"{path.removesuffix('.html') or 'home'}.png"
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


def test_the_site_opened_as_files_searches_and_draws_readable_diagrams(browser, site, request):
    """site/index.html opened as a file, in a 1280-pixel window: the search box answers a word found
    on one page only, and its result opens that page; Home's diagram draws its labels at a readable
    size (mermaid writes them at 16 px in the diagram's own units, shrunk with it to the column);
    the quickstart's code blocks fit the column (headless Chromium draws no scrollbar to measure:
    in a narrower window, docs/stylesheets/layout.css shows it)."""
    shots = ui_browser.screenshot_dir(request)
    page, asked = offline_page(browser, {"width": 1280, "height": 900})
    try:
        home = site / "index.html"
        ui_browser.visit(page, home.as_uri(), [heading(home.read_text(encoding="utf-8"))], shots / "home-file.png")
        page.locator("input[data-md-component=search-query]").press_sequentially(ONE_PAGE_WORD)
        results = page.locator(".md-search-result__item > a")  # a page found, or a section of it
        with contextlib.suppress(PlaywrightTimeout):  # reported below with what the search says
            results.first.wait_for(timeout=WAIT_S * 1000)
        page.screenshot(path=str(shots / "search-file.png"), full_page=True)
        meta = page.locator(".md-search-result__meta").all_inner_texts()  # none while the search has not started
        found = {urlsplit(link).path.rsplit("/", 1)[-1] for link in results.evaluate_all("links => links.map(a => a.href)")}
        assert found == {ONE_PAGE_FILE}, f"search for {ONE_PAGE_WORD!r} as files found {found} ({meta!r})"
        [(svg, width)] = wait_for_diagrams(page, 1, measure=True)[:1] or [("", 0)]
        drawn = float(re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+)', svg).group(1)) if svg else float("inf")
        label_px = 16 * width / drawn
        assert label_px >= MIN_LABEL_PX, (f"Home's diagram is {width:.0f} px wide for {drawn:.0f} px of drawing: "
                                          f"its labels read at {label_px:.1f} px")
        results.first.click()
        page.wait_for_url(lambda url: urlsplit(url).path.endswith(ONE_PAGE_FILE), timeout=WAIT_S * 1000)
        assert ONE_PAGE_WORD in ui_browser.page_text(page)
        page.goto((site / "quickstart.html").as_uri())
        cut = page.evaluate("""() => [...document.querySelectorAll('.md-typeset pre > code')]
            .filter(code => code.scrollWidth > code.clientWidth).map(code => code.textContent.slice(0, 80))""")
        assert page.locator(".md-typeset pre > code").count() > 3
        assert cut == [], f"quickstart code blocks wider than the column at 1280 px: {cut}"
        assert not asked, f"the site as files asked other hosts: {asked}"
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
