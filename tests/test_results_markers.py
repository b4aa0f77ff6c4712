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
    assert "| a | 12 | x\\|y |" in table and "| b | 3 | z |" in table
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
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=" in page
    assert "a &amp; b" in page and "](" not in page  # nor a Markdown link
    assert "| 1 |" in page and page.count("&lt;script&gt;") == 3  # numbers as they were


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
