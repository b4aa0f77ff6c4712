"""The Prefect UI in a real browser: a flow's run and its artifacts, rendered.

Starts a real Prefect server with the UI on (tests/prefect_stack.py, no work pools; its API
protected by an auth string, which the browser types into each UI's login page), runs
a tiny flow against it twice in a subprocess that makes a table artifact, a markdown
artifact and a location artifact (runs/artifacts.py's, as `model` and `link-matches` are made),
then opens the server's two UIs (v1 at the root, v2 under /v2) in headless
Chromium (tests/ui_browser.py) and checks the flow run's page (the run, its logs), each
artifact key's page (description, the runs that made it), each artifact's page (the table's
cells, the markdown rendered as HTML, the location and its command as text, no file:// link) and
the artifacts list at /artifacts. Screenshots go to
$PEARL_SCREENSHOT_DIR, else run/screenshots/<test>/ (v1/ and v2/ in either).

Needs Chromium (scripts/setup.sh installs Debian's when run as root; $PEARL_CHROMIUM names
another): skipped without it, except under CI (env CI set), where that is a failure.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests import ui_browser
from tests.prefect_stack import ROOT, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

FLOW_NAME = "pearl-ui-check"
TABLE_KEY = "pearl-ui-table"
MARKDOWN_KEY = "pearl-ui-markdown"
# Texts that appear in one artifact only, so that a page showing them shows that artifact.
TABLE_CELL = "table-cell-7731"
TABLE_HEADER = "phrase_count"
MARKDOWN_HEADING = "PEARL markdown heading"
MARKDOWN_TEXT = "markdown-only text 5309"
TABLE_DESCRIPTION = "table artifact of the UI test"
MARKDOWN_DESCRIPTION = "markdown artifact of the UI test"
# A location artifact as the `model` and `link-matches` artifacts make it (runs.artifacts.publish_location):
# the quickstart's "Where to look" says it shows the path to copy and the commands that use it.
LOCATION_KEY = "pearl-ui-location"
LOCATION = "/srv/pearl-ui-check/data/models/0123abcd"
LOCATION_COMMAND = f"pearl encode --model {LOCATION} phrases.txt"
RUNS = 2  # a key's page lists every run's version: the second run shows beside the first

FLOW_SCRIPT = textwrap.dedent(f"""
    from prefect import flow
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from runs.artifacts import publish_location

    @flow(name={FLOW_NAME!r})
    def ui_check():
        create_table_artifact(
            key={TABLE_KEY!r},
            table=[{{"dataset": "phrases", {TABLE_HEADER!r}: 4242, "marker": {TABLE_CELL!r}}},
                   {{"dataset": "aliases", {TABLE_HEADER!r}: 17, "marker": "other"}}],
            description={TABLE_DESCRIPTION!r},
        )
        create_markdown_artifact(
            key={MARKDOWN_KEY!r},
            markdown="# {MARKDOWN_HEADING}\\n\\nSome {MARKDOWN_TEXT}, with **bold** words.\\n",
            description={MARKDOWN_DESCRIPTION!r},
        )
        publish_location({LOCATION!r}, key={LOCATION_KEY!r}, title="model", commands=[{LOCATION_COMMAND!r}])

    ui_check()
""")


def check_ui(page, base: str, shots: Path, runs: list, by_key: dict) -> None:
    """The flow run's page, each artifact key's page, each artifact's page, the artifacts list."""
    run = runs[-1]
    ui_browser.visit(page, ui_browser.flow_run_url(base, run.id),
                     [run.name, FLOW_NAME, "Completed", "Finished in state Completed()"],  # header, logs
                     shots / "flow-run.png")
    # A key's page: its description and the history of its versions, each with the flow
    # run that made it; the content is rendered on the artifact's own page only.
    ui_browser.visit(page, ui_browser.artifact_key_url(base, TABLE_KEY),
                     [TABLE_KEY, TABLE_DESCRIPTION, run.name], shots / "artifact-key-table.png")
    ui_browser.visit(page, ui_browser.artifact_key_url(base, MARKDOWN_KEY),
                     [MARKDOWN_KEY, MARKDOWN_DESCRIPTION, run.name], shots / "artifact-key-markdown.png")

    # The artifacts themselves, rendered: a table with its header and cells...
    text = ui_browser.visit(page, ui_browser.artifact_url(base, by_key[TABLE_KEY].id),
                            [TABLE_DESCRIPTION, TABLE_HEADER, TABLE_CELL, "4242", "aliases"],
                            shots / "artifact-table.png")
    assert page.get_by_role("columnheader", name=TABLE_HEADER).count() == 1, text
    assert page.locator("table td", has_text=TABLE_CELL).count() == 1, text
    assert MARKDOWN_HEADING not in text
    # ... the markdown as HTML (a heading, bold words), not its source.
    text = ui_browser.visit(page, ui_browser.artifact_url(base, by_key[MARKDOWN_KEY].id),
                            [MARKDOWN_DESCRIPTION, MARKDOWN_HEADING, MARKDOWN_TEXT],
                            shots / "artifact-markdown.png")
    assert page.get_by_role("heading", name=MARKDOWN_HEADING).count() == 1, text
    bold = page.get_by_text("bold", exact=True)
    assert bold.count() == 1, text
    assert int(bold.evaluate("e => getComputedStyle(e).fontWeight")) >= 600
    assert f"# {MARKDOWN_HEADING}" not in text and "**bold**" not in text, text
    assert TABLE_CELL not in text

    # A location: the path and the command as text to copy, no link a browser refuses to open.
    text = ui_browser.visit(page, ui_browser.artifact_url(base, by_key[LOCATION_KEY].id), [LOCATION, LOCATION_COMMAND],
                            shots / "artifact-location.png")
    assert page.locator('a[href^="file:"]').count() == 0 and "```" not in text, text
    # A key's history: each run's version, the later run beside the first.
    ui_browser.visit(page, ui_browser.artifact_key_url(base, LOCATION_KEY), [LOCATION_KEY, *(r.name for r in runs)],
                     shots / "artifact-key-location.png")

    ui_browser.visit(page, ui_browser.artifacts_url(base), [TABLE_KEY, MARKDOWN_KEY, TABLE_DESCRIPTION],
                     shots / "artifacts.png")


def test_flow_run_and_artifacts_render_in_the_ui(tmp_path, request):
    ui_browser.require_browser()
    shots = ui_browser.screenshot_dir(request)
    started = time.monotonic()
    stack = Stack(tmp_path, ui=True, pools=())
    try:
        stack.start()

        # The UI finds its API through /ui-settings: it must be this server's.
        with urllib.request.urlopen(f"{stack.ui_url}/ui-settings", timeout=10) as r:
            settings = json.load(r)
        assert settings["api_url"] == stack.api_url, settings
        # ... and it asks for the auth string, and sends CSRF tokens, as the server requires.
        assert settings["auth"] == "BASIC" and settings["csrf_enabled"] is True, settings

        for _ in range(RUNS):
            out = subprocess.run([sys.executable, "-c", FLOW_SCRIPT], env=stack.env,
                                 cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
            assert out.returncode == 0, f"the flow failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"

        async def read(client):
            from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterKey,
                                                        FlowFilter, FlowFilterName)
            runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])))
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[TABLE_KEY, MARKDOWN_KEY, LOCATION_KEY])))
            return runs, artifacts

        runs, artifacts = stack.api(read)
        assert len(runs) == RUNS and all(r.state.is_completed() for r in runs), runs
        runs = sorted(runs, key=lambda r: r.start_time)
        run = runs[-1]
        by_key = {a.key: a for a in artifacts if a.flow_run_id == run.id}  # the later run's
        assert set(by_key) == {TABLE_KEY, MARKDOWN_KEY, LOCATION_KEY}, artifacts
        assert len(artifacts) == 3 * RUNS

        with ui_browser.open_browser() as browser:
            # The server serves two UIs with the same routes: v1 (Vue) at its root, v2
            # (React) under /v2. Deep links stay in their UI; the root sends a browser with
            # no saved preference to v2 (PREFECT_SERVER_UI_V2_ENABLED, default true).
            # Each is signed in on its own login page, in a browser context of its own.
            for page, base, at in ui_browser.each_ui(browser, stack.ui_url, stack.auth_string, shots):
                check_ui(page, base, at, runs, by_key)
        print(f"UI checked in {time.monotonic() - started:.1f}s; screenshots in {shots}")
    finally:
        survivors = stack.stop()
        assert not survivors, f"processes left running after teardown: {survivors}"
