"""The documentation site: it builds with --strict; its generated reference pages hold every
setting, every dataset column and every public name; a broken link, a missing results file or a
setting without a description fails the build; and the README's two commands are what CI runs."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "hooks"
sys.path.insert(0, str(HOOKS))

import api_reference  # noqa: E402
import config_reference  # noqa: E402
import datasets_reference  # noqa: E402
import research_nav  # noqa: E402
import typed_numbers  # noqa: E402


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def article(site: Path, page: str) -> str:
    text = (site / f"{page}.html").read_text(encoding="utf-8")
    return text[text.index("<article"):text.index("</article>")]


def section(page_html: str, anchor: str) -> str:
    """The HTML from the heading with id `anchor` to the next heading of the same level."""
    match = re.search(rf'<h(\d) id="{re.escape(anchor)}"', page_html)
    assert match, f"no heading #{anchor}"
    end = re.compile(rf"<h{match.group(1)}[ >]").search(page_html, match.end())
    return page_html[match.start():end.start() if end else None]


# --- the generated reference pages --------------------------------------------------------------

def test_configuration_page_holds_every_field_of_every_model(site):
    page = article(site, "reference/configuration")
    for _, parameter, model in config_reference.models():
        rows = section(page, parameter)
        for name, field in model.model_fields.items():
            assert f"<td><code>{name}</code></td>" in rows, f"{model.__name__}.{name} missing from the page"
        assert len(re.findall(r"<tr>", rows)) == len(model.model_fields) + 1  # + the header row


def test_configuration_page_shows_defaults_and_bounds():
    text = config_reference.render()
    assert re.search(r"\| `batch_size` \| `int` \| `512` \| ≥ 2 \|", text)
    assert re.search(r"\| `alias_min_anchor_share` \| `float` \| `0.5` \| ≥ 0, ≤ 1 \|", text)


def test_a_field_without_a_description_fails_the_generator():
    class Settings(BaseModel):
        described: int = Field(1, description="has one")
        bare: int = 2

    with pytest.raises(config_reference.MissingDescription, match="bare"):
        config_reference.render_model(Settings, "### Settings")


def test_datasets_page_holds_every_dataset_and_column(site):
    from storage.schemas import ALL

    page = article(site, "reference/datasets")
    for dataset, schema in ALL.items():
        rows = section(page, dataset)
        for field in schema:
            assert f"<td><code>{field.name}</code></td>" in rows, f"{dataset}.{field.name} missing"


def test_datasets_page_reads_the_schemas_comments():
    above, columns, entries = datasets_reference.source_notes(datasets_reference.SOURCE.read_text())
    assert above["TRAINING_SET"].startswith("What the training flow reads")  # past the _POSITIVE helper
    assert columns["NEGATIVES"]["score"] == "edit_sim - min-max-normalised cosine"
    assert entries["untyped_phrases"][0] == "PHRASES"


def test_api_page_documents_every_public_name(site):
    page = html.unescape(article(site, "reference/api"))
    source = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    for name, module in api_reference.public_names().items():
        assert f"::: pearl_model.{name}\n" in source, f"docs/reference/api.md has no ::: pearl_model.{name}"
        assert f'id="{module}.{name}"' in page, f"pearl_model.{name} not rendered"


def test_api_blocks_name_public_names_only():
    from mkdocs.exceptions import PluginError

    assert api_reference.resolve("::: pearl_model.load_encoder\n").startswith("::: pearl_model.")
    with pytest.raises(PluginError, match="not_public"):
        api_reference.resolve("::: pearl_model.not_public\n")


def test_every_research_page_is_in_the_nav(site):
    nav = (site / "index.html").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs" / "research").glob("*.md")):
        target = f"research/{page.stem}.html"  # pages end in .html: the offline plugin turns directory URLs off
        assert f'href="{target}"' in nav, f"{page.name} missing from the nav"


def test_research_nav_follows_the_research_index(site):
    """The sidebar lists the studies in the order research/index.md links them (read here from
    the index's Markdown, apart from the hook that builds the nav)."""
    index = (ROOT / "docs" / "research" / "index.md").read_text(encoding="utf-8")
    linked = list(dict.fromkeys(re.findall(r"\]\(([\w-]+)\.md\)", index)))
    home = (site / "index.html").read_text(encoding="utf-8")
    sidebar = home[:home.index('class="md-content"')]  # the primary nav comes before the page's content
    in_nav = [name for name in dict.fromkeys(re.findall(r'href="research/([\w-]+)\.html"', sidebar)) if name != "index"]
    assert len(linked) > 20 and in_nav == linked


def test_research_nav_is_the_index_sections_titled_by_the_pages_headings(tmp_path):
    from mkdocs.exceptions import PluginError

    research = tmp_path / "research"
    research.mkdir()
    (research / "index.md").write_text(
        "# Research\n\n## Where it stands\n\n- [B](speed-b.md)\n\n```\n## not a section\n```\n"
        "## The `data`\n\n- [A](data-a.md#setup), [B again](speed-b.md)\n\n## Adding a study\n\nNo links.\n")
    (research / "speed-b.md").write_text("```\n# not this\n```\n# Speed B\n")
    (research / "data-a.md").write_text("# Data `A`\n\ntext\n")
    assert research_nav.research_nav(tmp_path) == [
        "research/index.md", {"Where it stands": [{"Speed B": "research/speed-b.md"}]},
        {"The data": [{"Data A": "research/data-a.md"}]}]
    (research / "eval-c.md").write_text("# Eval C\n")  # a page the index does not link
    with pytest.raises(PluginError, match="eval-c.md"):
        research_nav.research_nav(tmp_path)
    (research / "eval-c.md").unlink()
    (research / "data-a.md").write_text("no heading\n")
    with pytest.raises(PluginError, match="data-a.md"):
        research_nav.research_nav(tmp_path)
    (research / "data-a.md").unlink()  # linked, but not there
    with pytest.raises(PluginError, match="data-a.md"):
        research_nav.research_nav(tmp_path)


# --- what the pages look like -------------------------------------------------------------------

def test_no_page_has_two_headings_of_one_name(site):
    """Two headings of one name on a page get anchors `x` and `x_1`: a reader cannot tell them apart."""
    repeated = []
    for page in sorted(site.rglob("*.html")):
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', page.read_text(encoding="utf-8")))
        repeated += [f"{page.relative_to(site)}: #{i}" for i in sorted(ids)
                     if re.fullmatch(r"(.+)_\d+", i) and re.fullmatch(r"(.+)_\d+", i)[1] in ids]
    assert not repeated


@pytest.mark.timeout(300)
def test_code_in_tables_breaks_between_words_only(site):
    """In a browser, no code span in a table cell wraps inside a word (Material breaks code
    anywhere: the configuration reference showed `input_forma` / `t`), and a table's first
    column, the names, never wraps."""
    from tests import ui_browser

    ui_browser.require_browser()
    script = """() => [...document.querySelectorAll('.md-typeset td code')]
        .filter(c => c.getClientRects().length > 1 && (c.closest('td').cellIndex === 0 || !/[\\s-]/.test(c.textContent)))
        .map(c => c.closest('td').cellIndex + ': ' + c.textContent)"""
    broken = {}
    with ui_browser.open_browser() as browser:
        page = ui_browser.new_page(browser, {"width": 1280, "height": 900})
        for name in ("reference/configuration", "reference/datasets", "operating"):
            page.goto((site / f"{name}.html").as_uri())
            assert page.locator("td code").count() > 10
            broken[name] = page.evaluate(script)
    assert broken == {name: [] for name in broken}


# --- what fails the build -----------------------------------------------------------------------

class _AnyTag(yaml.SafeLoader):
    """mkdocs.yml's python/name and !relative tags read as None: only plain keys are wanted."""


_AnyTag.add_multi_constructor("", lambda loader, suffix, node: None)


@pytest.fixture
def tiny(tmp_path):
    """A throwaway MkDocs project with the site's hooks and link validation, no nav."""
    real = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_AnyTag)
    config = {"site_name": "tiny", "docs_dir": "docs", "validation": real["validation"],
              "hooks": [str(ROOT / h) for h in real["hooks"]]}
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Known\n", encoding="utf-8")

    def build(index: str) -> subprocess.CompletedProcess:
        (tmp_path / "docs" / "index.md").write_text(index, encoding="utf-8")
        return mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")

    return build


def test_the_tiny_project_builds_when_nothing_is_wrong(tiny):
    result = tiny("# Home\n\nSee [other](other.md#known).\n")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("index, error", [
    ("# Home\n\nSee [gone](missing.md).\n", "missing.md"),
    ("# Home\n\nSee [other](other.md#unknown-anchor).\n", "unknown-anchor"),
    ('# Home\n\nScore {{ value("no-such-results.json", "x") }}.\n', "no-such-results.json"),
])
def test_the_build_fails(tiny, index, error):
    result = tiny(index)
    assert result.returncode != 0
    assert error in result.stderr


def test_a_number_typed_on_a_research_page_fails_the_build(tiny, tmp_path):
    (tmp_path / "docs" / "research").mkdir()
    (tmp_path / "docs" / "research" / "speed-study.md").write_text("# Study\n\nThe build took 1,234 s.\n")
    result = tiny("# Home\n")
    assert result.returncode != 0
    assert "speed-study.md:3: '1,234 s'" in result.stderr


# --- no measured number typed on a research page --------------------------------------------------

def test_a_typed_measurement_is_flagged_and_a_setting_or_a_rendered_value_is_not():
    page = ("# Study\n\nIt took 1,234 s and about 3 GB, at 3x, within 0.3 (± 1.2) on 95.2% of it.\n"
            "Averaged `0.5`, `average_weight` 0.75, a `3x` target, 95% intervals, arXiv 2103.04489, 2026, issue 47,\n"
            '{{ value("x.json", "seconds") }} s, {{ value("x.json", "ratio") }}x, [a link](page.md#step-0.5), `3.5 GB`.\n'
            "\n```bash\nsleep 2.5   # 2.5 s\n```\n")
    assert typed_numbers.flagged(page) == [(3, "1,234 s"), (3, "3 GB"), (3, "3x"), (3, "0.3"), (3, "± 1.2"),
                                           (3, "95.2%")]


def test_the_research_pages_type_no_measured_number():
    assert typed_numbers.scan(ROOT / "docs" / "research") == []


# --- CI runs what the README says ---------------------------------------------------------------

def test_readme_gives_the_two_commands_in_a_bash_block():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M)
    lines = {line.strip() for block in blocks for line in block.splitlines()}
    assert {"bash scripts/run.sh", "bash scripts/test.sh"} <= lines


def test_ci_builds_the_docs_strictly_and_runs_the_tests():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.strip().startswith("#")]
    assert "exec bash scripts/test.sh" in ci or "bash scripts/test.sh" in ci
    assert "bash scripts/docs.sh build" in ci
    docs_sh = (ROOT / "scripts" / "docs.sh").read_text()
    assert re.search(r"^\s*build\).*mkdocs build --strict", docs_sh, re.M)
    assert "'.[test,docs]'" in (ROOT / "scripts" / "setup.sh").read_text()  # setup installs mkdocs
