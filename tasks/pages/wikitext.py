"""Wikitext to plain text, link anchors and page kind, with mwparserfromhell.

Part of the pages stage (tasks/pages/), not a stage of its own. mwparserfromhell gives the
node tree; the rendering choices (what counts as prose) are ours: templates, references,
tables, files and categories carry no sentences, and the reference-like sections at the end
of an article are lists of citations, not prose.
"""
from __future__ import annotations

import html
import re

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument,
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Tag,
    Template,
    Text,
    Wikilink,
)
from mwparserfromhell.wikicode import Wikicode

# Tags whose content is not running prose.
_DROP_TAGS = {
    "ref", "references", "gallery", "math", "chem", "ce", "table", "timeline", "score",
    "syntaxhighlight", "source", "pre", "code", "imagemap", "mapframe", "graph", "templatedata",
    "noinclude", "includeonly", "onlyinclude", "nowiki", "poem", "hiero", "inputbox",
}
_BREAK_TAGS = {"br", "li", "dt", "dd", "p", "hr", "tr", "td", "th", "div"}
_SKIP_SECTIONS = {
    "references", "external links", "see also", "further reading", "notes", "bibliography",
    "sources", "footnotes", "citations", "notes and references", "works cited", "gallery",
    "literature", "references and notes",
}
# Namespaces a link can point into without being a link to an article (plus interwiki).
_LINK_NAMESPACES = {
    "file", "image", "media", "category", "template", "wikipedia", "wp", "help", "portal",
    "user", "talk", "special", "module", "draft", "book", "mediawiki", "wikt", "wiktionary",
    "s", "wikisource", "q", "wikiquote", "commons", "n", "b", "v", "voy", "species", "d",
    "wikidata", "meta", "m", "mw", "c", "w", "wikipedia talk", "user talk", "category talk",
}
# Links that are not shown in the running text (an image, a category tag).
_HIDDEN_LINK_NAMESPACES = {"file", "image", "category"}
_INTERLANGUAGE = re.compile(r"^[a-z]{2,3}(-[a-z]{2,8})*$")
_DAB_TEMPLATES = {
    "disambiguation", "disambig", "dab", "disamb", "hndis", "geodis", "surname", "given name",
    "letter-number combination disambiguation", "place name disambiguation", "hospital disambiguation",
    "school disambiguation", "mathematical disambiguation", "set index article", "shipindex",
    "human name disambiguation", "disambiguation cleanup", "number disambiguation",
}
_REDIRECT_RE = re.compile(r"^\s*#\s*redirect\s*:?\s*\[\[([^\]|]+)", re.I)
_EMPTY_PARENS = re.compile(r"\(\s*[,;:]?\s*\)|\[\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
_WS = re.compile(r"[ \t\u00a0\u2009\u200b]+")


def normalize_title(title: str, first_letter_case: bool = True) -> str:
    """A link target as MediaWiki resolves it: no fragment, spaces, first letter upper."""
    title = html.unescape(title).split("#", 1)[0].replace("_", " ")
    title = _WS.sub(" ", title).strip().lstrip(":").strip()
    if first_letter_case and title:
        title = title[0].upper() + title[1:]
    return title


def redirect_target(wikitext: str) -> str | None:
    m = _REDIRECT_RE.match(wikitext)
    return normalize_title(m.group(1)) if m else None


def parse(wikitext: str) -> Wikicode:
    return mwparserfromhell.parse(wikitext)


def page_kind(title: str, code: Wikicode | None = None) -> str:
    """article | disambiguation | list."""
    t = title.lower()
    if t.endswith("(disambiguation)"):
        return "disambiguation"
    if t.startswith(("list of ", "lists of ")):
        return "list"
    for tpl in code.filter_templates(recursive=False) if code is not None else []:
        name = str(tpl.name).strip().lower().replace("_", " ")
        if name in _DAB_TEMPLATES or name.endswith(" disambiguation"):
            return "disambiguation"
    return "article"


def _is_article_link(target: str, namespaces: set[str]) -> bool:
    if not target or target.startswith("#"):
        return False
    if target.startswith(":"):
        target = target[1:]
    if ":" in target:
        written = target.split(":", 1)[0].strip()
        prefix = written.lower()
        # Language prefixes are written in lower case ([[fr:Paris]]); "CSI: Miami" is a title.
        if prefix in _LINK_NAMESPACES or prefix in namespaces or _INTERLANGUAGE.match(written):
            return False
    return True


def _is_displayed_link(target: str) -> bool:
    """Whether MediaWiki shows the link as text in the prose: all links but file
    embeds, category tags and interlanguage links, unless escaped by a leading colon."""
    if target.startswith(":"):
        return True
    if ":" in target:
        written = target.split(":", 1)[0].strip()
        if written.lower() in _HIDDEN_LINK_NAMESPACES or _INTERLANGUAGE.match(written):
            return False
    return True


def anchors(code: Wikicode, namespaces: set[str] = frozenset()) -> list[tuple[str, str]]:
    """(anchor text, normalised target) for piped links to articles whose text differs."""
    out = []
    for link in code.filter_wikilinks(recursive=True):
        target = str(link.title)
        if link.text is None or not _is_article_link(target.strip(), namespaces):
            continue
        text = _WS.sub(" ", render(link.text)).strip()
        target = normalize_title(target)
        if text and target and text.casefold() != target.casefold() and len(text) <= 200:
            out.append((text, target))
    return out


def render(code: Wikicode, namespaces: set[str] = frozenset()) -> str:
    """Readable prose of a node list; headings become paragraph breaks."""
    parts: list[str] = []
    skip_level: int | None = None
    for node in code.nodes:
        if isinstance(node, Heading):
            title = _WS.sub(" ", node.title.strip_code()).strip().lower()
            if skip_level is not None and node.level <= skip_level:
                skip_level = None
            if skip_level is None and title in _SKIP_SECTIONS:
                skip_level = node.level
            parts.append("\n\n")
            continue
        if skip_level is not None:
            continue
        parts.append(_render_node(node, namespaces))
    return "".join(parts)


def _render_node(node, namespaces: set[str]) -> str:
    if isinstance(node, Text):
        return str(node.value)
    if isinstance(node, Wikilink):
        # [[wikt:mane|mane]] and [[#History|history]] are prose too, only not article links.
        if not _is_displayed_link(str(node.title).strip()):
            return ""
        return render(node.text, namespaces) if node.text is not None else str(node.title).strip().lstrip(":").split("#", 1)[0]
    if isinstance(node, ExternalLink):
        return render(node.title, namespaces) if node.title is not None else ""
    if isinstance(node, HTMLEntity):
        return node.normalize()
    if isinstance(node, (Template, Comment, Argument)):
        return ""
    if isinstance(node, Tag):
        tag = str(node.tag).strip().lower()
        if tag in _DROP_TAGS:
            return ""
        if tag in _BREAK_TAGS:
            inner = render(node.contents, namespaces) if node.contents is not None else ""
            return "\n" + inner + "\n"
        return render(node.contents, namespaces) if node.contents is not None else ""
    return ""


def paragraphs(text: str) -> list[str]:
    """Split rendered text into prose lines, tidying what removed markup leaves behind."""
    out = []
    for line in html.unescape(text).split("\n"):
        line = line.strip()
        # Leftover list/indent/table markers start lines that are not prose.
        if not line or line[0] in "*#:;|!{}" or line.startswith(("__", "[[", "]]")):
            continue
        line = _EMPTY_PARENS.sub("", line)
        line = _WS.sub(" ", line)
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", line).strip()
        if line:
            out.append(line)
    return out


def clean(wikitext: str, namespaces: set[str] = frozenset()) -> tuple[str, Wikicode]:
    """Plain text (one paragraph a line) and the parse tree, for kind and anchors."""
    code = parse(wikitext)
    return "\n".join(paragraphs(render(code, namespaces))), code
