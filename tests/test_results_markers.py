"""The docs' numbers come from benchmarks/results/: the markers' renderer (docs/hooks/results.py)
and the README's generated status table (scripts/render_status.py)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def results(tmp_path, monkeypatch):
    module = _module("docs_results", ROOT / "docs" / "hooks" / "results.py")
    (tmp_path / "run.json").write_text(json.dumps({
        "rows": {"a": {"speed": 12.345, "name": "x|y"}, "b": {"speed": 3.0, "name": "z"}},
        "list": [{"engine": "onnx", "v": 1}, {"engine": "torch", "v": 2}],
        "dotted": {"0.5": 7}}))
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    module.load.cache_clear()
    return module


def test_values_and_tables_render_from_the_file(results):
    out = results.render('a {{ value("run.json", "rows.a.speed", ".1f") }} b '
                         '{{ value("run.json", "list.[engine=torch].v") }} '
                         '{{ value("run.json", ["dotted", "0.5"]) }}')
    assert out == "a 12.3 b 2 7"
    table = results.render('{{ table("run.json", "rows", {"k": "_key", "s": ("speed", ".0f"), "n": "name"}) }}')
    assert "| a | 12 | x&#124;y |" in table and "| b | 3 | z |" in table  # a "|" splits no cell
    only = results.render('{{ table("run.json", "list", {"e": "engine"}, where={"v": 2}) }}')
    assert "torch" in only and "onnx" not in only


@pytest.mark.parametrize("marker, message", [
    ('{{ value("missing.json", "x") }}', "does not exist"),
    ('{{ value("run.json", "rows.c.speed") }}', "no 'c'"),
    ('{{ value("run.json", "list.[engine=tf].v") }}', "engine='tf'"),
    ('{{ value("run.json", "list.5") }}', "out of range"),
    ('{{ value("../run.json", "x") }}', "not a .json file directly"),
    ('{{ value("run.json", __import__("os").getcwd()) }}', "malformed"),
    ('{{ table("run.json", "rows", {"s": "speed"}, where={"speed": 99}) }}', "no rows"),
])
def test_a_marker_that_cannot_render_is_an_error_naming_it(results, marker, message):
    with pytest.raises(results.ResultsError, match=message) as err:
        results.render(f"line one\n{marker}\n", "page.md")
    assert "page.md:2" in str(err.value)


def test_html_in_a_results_file_reaches_the_page_escaped(results):
    """A results file is data: whatever it holds is shown as text, never run as the page's HTML
    (issue 54, item 9)."""
    evil = ["<script>alert(1)</script>", '<img src=x onerror="alert(1)">', "a & b's \"quote\"",
            "[x](javascript:alert(1))"]
    (results.RESULTS / "evil.json").write_text(json.dumps({"v": evil[0], "rows": [
        {"name": e, "note": {"deep": e}} for e in evil], "keys": {evil[1]: 1}}))
    page = results.render('{{ value("evil.json", "v") }}\n'
                          '{{ table("evil.json", "rows", {"n": "name", "d": "note.deep"}) }}\n'
                          '{{ table("evil.json", "keys", {"k": "_key", "v": "_value"}) }}')
    assert "<script" not in page and "<img" not in page and "</script" not in page
    tags, text = _site_html(page)
    assert {t for t, _ in tags} <= {"p", "table", "thead", "tbody", "tr", "th", "td"} and not any(a for _, a in tags)
    assert all(e in text for e in evil)  # shown as text
    assert "| 1 |" in page and page.count("&#60;script&#62;") == 3  # numbers as they were


def _site_html(markdown_text: str) -> tuple[list[tuple[str, list]], str]:
    """The HTML the site makes of a page (mkdocs.yml's extensions that touch inline text), as its
    tags with their attributes, and its text."""
    import html.parser

    import markdown

    body = markdown.markdown(markdown_text, extensions=["attr_list", "md_in_html", "tables", "admonition", "toc",
                                                        "pymdownx.inlinehilite", "pymdownx.superfences"])

    class Parser(html.parser.HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.tags, self.text = [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, attrs))

        def handle_data(self, data):
            self.text.append(data)

    parser = Parser()
    parser.feed(body)
    return parser.tags, "".join(parser.text)


# Issue 64 item 10: attr_list read "{: ...}" after a value as the attributes of the element before it.
ATTRS = ["*0.93*{: onclick=alert(document.domain) }", "0.93\n{: onclick=alert(1) }",
         "0.93\n\n# Title {: onclick=alert(1) }", "0.93\n{: #x .y onmouseover=alert(1) }", "_0.9_{: onclick=a }",
         "`0.9`{: onclick=a }", "0.9\n\n<div onclick=a>x</div>", "![a](x.png){: onerror=alert(1) }"]


@pytest.mark.parametrize("evil", ATTRS)
def test_a_results_value_cannot_add_an_element_or_an_attribute(results, evil):
    (results.RESULTS / "attrs.json").write_text(json.dumps({"v": evil, "rows": [{"n": evil, "m": 1.5}]}))
    page = results.render('Score {{ value("attrs.json", "v") }}\n\n'  # in a paragraph
                          '{{ table("attrs.json", "rows", {"N": "n", "M": ("m", ".1f")}) }}\n\n'  # in a table cell
                          '## Heading {{ value("attrs.json", "v") }}\n\n'  # in a heading
                          '{{ value("attrs.json", "v") }}\n\n'  # alone on a line
                          '- item `{{ value("attrs.json", "v") }}`\n')  # as code
    tags, text = _site_html(page)
    assert [t for t, _ in tags] == ["p", "table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td", "h2", "p",
                                    "ul", "li", "code"]
    assert [(t, [n for n, _ in a]) for t, a in tags if a] == [("h2", ["id"])]  # the heading's anchor, only
    assert text.count(evil) == 5  # shown as it is, each time


@pytest.mark.parametrize("inside, ok", [("`w = {{ value('attrs.json', 'v') }} s`", False),
                                        ("`w = {{ value('attrs.json', 'n') }} s`", True),
                                        ("`{{ table('attrs.json', 'rows', {'N': 'n'}) }}`", False)])
def test_a_value_in_a_longer_code_span_is_its_text_or_an_error(results, inside, ok):
    (results.RESULTS / "attrs.json").write_text(json.dumps({"v": "0.9`{: onclick=a }", "n": -0.5, "rows": [{"n": 1}]}))
    if ok:
        tags, text = _site_html(results.render(inside))
        assert tags == [("p", []), ("code", [])] and text == "w = -0.5 s"
    else:
        with pytest.raises(results.ResultsError, match="code span"):
            results.render(inside)


def test_fenced_code_shows_markers_as_written(results):
    page = '```\n{{ value("missing.json", "x") }}\n```\n'
    assert results.render(page) == page


def test_every_results_file_is_valid_json():
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        json.loads(path.read_text(encoding="utf-8"))


def test_the_readme_status_table_is_rendered_from_its_results(tmp_path, monkeypatch):
    status = _module("render_status", ROOT / "scripts" / "render_status.py")
    assert status.main(["--check"]) == 0, "README.md's status table is stale"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index(status.START):readme.index(status.END)]
    assert "{{" not in block and "| PEARL, default recipe |" in block
    # a number typed over by hand is found stale
    stale = tmp_path / "README.md"
    first = block.split("| E5-small (backbone) | ")[1].split(" |")[0]
    stale.write_text(readme.replace(f"| E5-small (backbone) | {first} |", "| E5-small (backbone) | 99.9 |"))
    monkeypatch.setattr(status, "README", stale)
    assert status.main(["--check"]) == 1
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="stale"):  # and the docs build, which runs it as a hook, fails
        status.on_pre_build(None)
