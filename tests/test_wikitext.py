"""tasks.pages.wikitext: wikitext -> prose, link anchors, page kind, redirects."""
from __future__ import annotations

import pytest

from tasks.pages import wikitext
from tasks.pages.wikitext import anchors, clean, normalize_title, page_kind, parse, redirect_target


def text_of(src: str) -> str:
    return clean(src)[0]


def anchors_of(src: str, namespaces=frozenset()) -> list[tuple[str, str]]:
    return anchors(parse(src), namespaces)


# --- prose ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src, expected",
    [
        ("'''Ada Lovelace''' was an ''English'' mathematician.", "Ada Lovelace was an English mathematician."),
        ("{{Infobox person|name=Ada|born=1815}}Ada was born in 1815.", "Ada was born in 1815."),
        ("It is {{convert|5|km}} long and {{nested|{{inner|x}}}} wide.", "It is long and wide."),
        ("Paris ({{IPA-fr|pa\u0281i}}) is big.", "Paris is big."),  # no "()" left behind
        ('A fact.<ref>{{cite book|title=Source}}</ref> Another.<ref name="a"/>', "A fact. Another."),
        ("A fact <ref>x</ref>.", "A fact."),
        ('{| class="wikitable"\n|-\n! Head\n|-\n| cell one || cell two\n|}\nAfter the table.', "After the table."),
        ("[[File:Ada.jpg|thumb|left|A portrait caption.]]She wrote notes.", "She wrote notes."),
        ("[[Image:X.png|thumb|Caption [[Rome|city]].]]Text here.", "Text here."),
        ("She studied.[[Category:Mathematicians]][[Category:1815 births|Lovelace]]", "She studied."),
        ("She worked with [[Charles Babbage|Babbage]] in [[London]].", "She worked with Babbage in London."),
        ("An [[Paris|''old'' city]].", "An old city."),
        ("Tom &amp; Jerry &ndash; a cat&nbsp;and a mouse &#8212; &lt;b&gt;.", "Tom & Jerry \u2013 a cat and a mouse \u2014 <b>."),
        ("Visit [http://example.com the site] today.", "Visit the site today."),
        ("Text<!-- hidden comment --> here.", "Text here."),
        ("The formula <math>x^2</math> holds.", "The formula holds."),
        ("__NOTOC__\nProse line.", "Prose line."),
        # list items are shown as lines of their own, without their markers
        ("Intro.\n* a list item\n# numbered\n: indented\nOutro.", "Intro.\na list item\nnumbered\nindented\nOutro."),
        ("[[fr:Ada Lovelace]][[de:Ada Lovelace]]Prose.", "Prose."),
    ],
)
def test_markup_cleaning(src, expected):
    assert text_of(src) == expected


def test_headings_are_paragraph_breaks_not_text():
    out = text_of("Lead sentence.\n== Early life ==\nBorn in London.\n=== Education ===\nTaught at home.")
    assert out.split("\n") == ["Lead sentence.", "Born in London.", "Taught at home."]
    assert "Early life" not in out and "Education" not in out


def test_reference_like_sections_are_dropped():
    src = (
        "Lead prose.\n"
        "== History ==\nHistory prose.\n"
        "== See also ==\nSee-also prose.\n"
        "== References ==\n{{reflist}}\nReference prose.\n"
        "=== Sources ===\nSubsection prose.\n"
        "== External links ==\n* [http://x.com Site]\nLinks prose.\n"
        "== Legacy ==\nLegacy prose.\n"
    )
    assert text_of(src).split("\n") == ["Lead prose.", "History prose.", "Legacy prose."]


def test_subsection_named_notes_inside_article_is_skipped_only_to_its_end():
    src = "== Career ==\nCareer prose.\n=== Notes ===\nNote prose.\n=== Later ===\nLater prose."
    assert text_of(src).split("\n") == ["Career prose.", "Later prose."]


@pytest.mark.parametrize(
    "src, expected",
    [
        # Links that are not article links are still prose where MediaWiki shows them as text.
        ("Frogs are typically [[wikt:fossorial|fossorial]] species.", "Frogs are typically fossorial species."),
        ("See the [[#History|history]] below.", "See the history below."),
        ("Birds are listed in [[:Category:Birds|the bird category]].", "Birds are listed in the bird category."),
        ("Read [[Wikipedia:Verifiability|the policy]] first.", "Read the policy first."),
        ("Watch [[CSI: Miami|the show]] tonight.", "Watch the show tonight."),
    ],
)
def test_inline_non_article_links_keep_their_text(src, expected):
    assert text_of(src) == expected


def test_clean_returns_parse_tree():
    text, code = clean("{{Disambiguation}}\n[[Paris|City]]")
    assert text == "City"
    assert [str(t.name) for t in code.filter_templates()] == ["Disambiguation"]


# --- anchors ------------------------------------------------------------------------------------
def test_piped_links_give_anchor_and_target():
    src = "An [[England|English]] writer and [[Analytical Engine#Design|the engine]] builder, [[London]]."
    assert anchors_of(src) == [("English", "England"), ("the engine", "Analytical Engine")]


@pytest.mark.parametrize(
    "link, target",
    [
        ("[[new_york_city|the Big Apple]]", "New york city"),
        ("[[  Paris  |the capital]]", "Paris"),
        ("[[Paris#Climate|its weather]]", "Paris"),
        ("[[AT&amp;T|the phone company]]", "AT&T"),
        ("[[\u00e9cole normale|the school]]", "\u00c9cole normale"),
        ("[[CSI: Miami|the show]]", "CSI: Miami"),
        ("[[Star Wars: A New Hope|the film]]", "Star Wars: A New Hope"),
    ],
)
def test_anchor_target_is_normalised(link, target):
    found = anchors_of(f"Text {link} here.")
    assert len(found) == 1 and found[0][1] == target


@pytest.mark.parametrize(
    "src",
    [
        "[[London]]",  # unpiped
        "[[File:X.jpg|a caption]]",
        "[[Category:Birds|Sort key]]",
        "[[:Category:Birds|the bird category]]",
        "[[Wikipedia:Verifiability|the policy]]",
        "[[wikt:fossorial|fossorial]]",
        "[[Template:Infobox|the infobox]]",
        "[[fr:Paris|Paris en fran\u00e7ais]]",
        "[[zh-yue:Paris|in Cantonese]]",
        "[[#History|history]]",
        "[[Paris|paris]]",  # same as the target, ignoring case
        "[[Paris|PARIS]]",
        "[[new_york|New york]]",  # the same once normalised
    ],
)
def test_not_anchors(src):
    assert anchors_of(f"Some {src} text.") == []


def test_anchor_text_markup_stripped_and_long_text_skipped():
    assert anchors_of("[[Paris|''City'' of '''light''']]") == [("City of light", "Paris")]
    assert anchors_of("[[Paris|" + "word " * 50 + "]]") == []


def test_dump_namespaces_are_not_article_links():
    src = "[[Gadget:Tools|the tools]]"
    assert anchors_of(src) == [("the tools", "Gadget:Tools")]
    assert anchors_of(src, {"gadget"}) == []


def test_repeated_anchor_is_listed_each_time():
    assert anchors_of("[[Paris|the city]] and [[Paris|the city]]") == [("the city", "Paris")] * 2


# --- page kinds and redirects --------------------------------------------------------------------
@pytest.mark.parametrize(
    "title, src, kind",
    [
        ("Mercury (disambiguation)", "Mercury may be a planet.", "disambiguation"),
        ("Mercury", "'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}", "disambiguation"),
        ("Mercury", "{{Disambig}}", "disambiguation"),
        ("Mercury", "{{dab|geo}}", "disambiguation"),
        ("John Smith", "{{hndis|Smith, John}}", "disambiguation"),
        ("Springfield", "{{Place name disambiguation}}", "disambiguation"),
        ("Springfield", "{{Set index article}}", "disambiguation"),
        ("List of planets", "The planets are listed.", "list"),
        ("Lists of lists", "Text.", "list"),
        ("Listing", "A listing is a thing.", "article"),
        ("Mercury (planet)", "{{Infobox planet}} Mercury is a planet.", "article"),
        ("Mercury", "He went to [[Mercury]].{{disambiguation needed|date=2020}}", "article"),
    ],
)
def test_page_kind(title, src, kind):
    assert page_kind(title, parse(src)) == kind


def test_page_kind_without_parse_tree_uses_title_only():
    assert page_kind("Foo (disambiguation)") == "disambiguation"
    assert page_kind("List of foos") == "list"
    assert page_kind("Foo") == "article"


@pytest.mark.parametrize(
    "src, target",
    [
        ("#REDIRECT [[Alpha]]", "Alpha"),
        ("#redirect [[new_york_city#History]]", "New york city"),
        ("#REDIRECT: [[Beta]]", "Beta"),
        ("  #  Redirect [[gamma|label]]\n{{R from move}}", "Gamma"),
        ("#WEITERLEITUNG [[X]]", None),
        ("Text first. #REDIRECT [[Alpha]]", None),
        ("An article about [[Alpha]].", None),
    ],
)
def test_redirect_target(src, target):
    assert redirect_target(src) == target


def test_normalize_title():
    assert normalize_title("  foo_bar   baz#Section ") == "Foo bar baz"
    assert normalize_title(":Category:Birds") == "Category:Birds"
    assert normalize_title("iPhone", first_letter_case=False) == "iPhone"
    assert normalize_title("AT&amp;T") == "AT&T"
    assert normalize_title("#Only a fragment") == ""


def test_plain_text_list_and_table_lines_are_not_prose():
    # paragraphs() is also what plain-text (JSON lines) input goes through.

    assert wikitext.paragraphs("  Foo ( ) bar , baz .\n\n|}\n{{\n* item\nLast  line.") == ["Foo bar, baz.", "Last line."]
