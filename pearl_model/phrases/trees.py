"""Constituents of a constituency tree, as character spans over the sentence text.

Input: a Penn-Treebank bracketed string (benepar's ``span._.parse_string``, a PTB/OntoNotes
``.mrg`` tree) or an ``nltk.Tree``, plus either the character offsets of its tokens or the
sentence text to align its leaves to.

Rules:
  * Leaves: every string under the tree, tagged with its parent's label; a childless
    preterminal such as ``(_SP  )`` (the way benepar prints a whitespace token) is a blank
    leaf, so the leaves still line up one-to-one with the tokens. Leaves tagged ``-NONE-``
    (empty elements, traces like ``*T*-1``) have no text: they are dropped before alignment
    and take no token offset.
  * Alignment: with ``token_offsets`` the i-th (non-trace) leaf is the i-th token, whatever its
    spelling (benepar writes "(" as -LRB-); their counts must agree. With ``text`` instead,
    each leaf is found in order, after skipping whitespace only, as written or PTB-unescaped
    (-LRB- -> "(", `` and '' -> any straight or curly double quote, -- -> a dash, ...); a leaf
    that is not there raises ValueError rather than silently shifting every later offset.
  * Labels: functional tags and indices are stripped (NP-SBJ-1 -> NP, PP-LOC=2 -> PP);
    labels starting with "-" (-NONE-, -LRB-) are tags, kept whole. Only NP, VP, PP, ADVP and
    ADJP nodes are reported (WHNP, QP, NML and the like are not); every nested one is.
  * Edges: punctuation leaves (by tag, see PUNCT_TAGS) and blank leaves are stripped from
    both ends of each span, so "the dog ," is reported as "the dog"; a node left empty
    (a VP over a lone ".") is dropped. Brackets and PTB quotes (`` '') are stripped only
    with their partner or when their partner is outside the span, so a phrase never
    gains an unbalanced one: "(AAPL)" -> "AAPL", but "Apple (AAPL)" stays whole.
  * Unary chains (NP over PP over the same words, S/VP over one verb) give the same span
    more than once; ``spans.dedupe`` keeps one, the first type in LEXICAL_TYPES order.
  * Head: None; a tree alone does not say which token is the head (the benepar backend
    fills heads from spaCy's dependency parse).
"""
from __future__ import annotations

import re
from typing import Sequence

from nltk.tree import Tree

from .labels import LEXICAL_TYPES
from .spans import Constituent, dedupe

TRACE_TAG = "-NONE-"

# PTB and spaCy (OntoNotes) tags for punctuation and whitespace tokens. "$" and "#" are
# not here: "$ 5" is a noun phrase whose edge is the currency sign.
PUNCT_TAGS = frozenset({",", ".", ":", "``", "''", '"', "-LRB-", "-RRB-", "-LCB-", "-RCB-",
                        "-LSB-", "-RSB-", "HYPH", "NFP", "_SP", "SP"})

# Bracket and quote tags that pair up; stripping removes both of a pair or neither.
_OPEN = {"-LRB-": "-RRB-", "-LSB-": "-RSB-", "-LCB-": "-RCB-", "``": "''"}
_CLOSE = {close: open_ for open_, close in _OPEN.items()}

_DOUBLE_QUOTES = ('"', "\u201c", "\u201d", "\u201e", "\u00ab", "\u00bb", "``", "''")
# How a PTB leaf may be spelled in the raw text, besides as itself.
_UNESCAPE: dict[str, tuple[str, ...]] = {
    "-LRB-": ("(",), "-RRB-": (")",), "-LCB-": ("{",), "-RCB-": ("}",),
    "-LSB-": ("[",), "-RSB-": ("]",),
    "``": _DOUBLE_QUOTES, "''": _DOUBLE_QUOTES,
    "`": ("'", "\u2018", "\u201a"), "'": ("\u2019", "\u2018"),
    "--": ("\u2014", "\u2013", "-"),
}
_FUNCTIONAL = re.compile(r"[-=]")


def base_label(label: str) -> str:
    """The syntactic category without functional tags or indices: NP-SBJ=2 -> NP."""
    if not label or label.startswith("-"):
        return label
    return _FUNCTIONAL.split(label, 1)[0]


def _spellings(leaf: str) -> list[str]:
    """Ways a leaf may appear in the text, as written first."""
    out = [leaf, *_UNESCAPE.get(leaf, ())]
    unescaped = leaf.replace("\\/", "/").replace("\\*", "*")
    for esc, (raw, *_) in _UNESCAPE.items():
        if esc.startswith("-"):  # -LRB- inside a token: "a-LRB-b" is "a(b"
            unescaped = unescaped.replace(esc, raw)
    if unescaped != leaf:
        out.append(unescaped)
    return out


def align_leaves(words: Sequence[str], text: str) -> list[tuple[int, int]]:
    """Character span of each word in text, found in order with only whitespace between.

    A blank word (empty or whitespace) gets a zero-width span at the current position.
    """
    offsets, pos = [], 0
    for word in words:
        if not word.strip():
            offsets.append((pos, pos))
            continue
        while pos < len(text) and text[pos].isspace():
            pos += 1
        for cand in _spellings(word):
            if text.startswith(cand, pos):
                offsets.append((pos, pos + len(cand)))
                pos += len(cand)
                break
        else:
            raise ValueError(f"tree leaf {word!r} not found at character {pos} of {text!r}")
    return offsets


def _leaves(tree: Tree) -> list[tuple[str, str]]:
    """(tag, word) per leaf in order, traces included; a childless node is a blank leaf."""
    out: list[tuple[str, str]] = []

    def walk(node: Tree) -> None:
        if len(node) == 0:
            out.append((node.label(), ""))
        for child in node:
            if isinstance(child, Tree):
                walk(child)
            else:
                out.append((node.label(), child))

    walk(tree)
    return out


def _partner(i: int, lo: int, hi: int, tags: Sequence[str]) -> int | None:
    """Index in [lo, hi) of the bracket matching the opener or closer at i, if there."""
    tag = tags[i]
    if tag in _OPEN:
        mate, step, stop = _OPEN[tag], 1, hi
    else:
        mate, step, stop = _CLOSE[tag], -1, lo - 1
    depth = 0
    for j in range(i, stop, step):
        depth += (tags[j] == tag) - (tags[j] == mate)
        if depth == 0:
            return j
    return None


def _trim(lo: int, hi: int, leaves: Sequence[tuple[str, str]], edge_ok: Sequence[bool]) -> tuple[int, int]:
    """Leaf range [lo, hi) without edge punctuation, never splitting a bracket pair."""
    tags = [tag for tag, _ in leaves]
    while lo < hi:
        left, right = tags[lo], tags[hi - 1]
        if not edge_ok[lo] and left not in _OPEN:
            lo += 1
        elif not edge_ok[hi - 1] and right not in _CLOSE:
            hi -= 1
        elif left in _OPEN and (mate := _partner(lo, lo, hi, tags)) in (None, hi - 1):
            lo, hi = lo + 1, hi - (mate is not None)  # unmatched, or enclosing the whole span
        elif right in _CLOSE and _partner(hi - 1, lo, hi, tags) is None:
            hi -= 1
        else:
            break
    return lo, hi


def constituents_from_tree(tree: str | Tree, token_offsets: Sequence[tuple[int, int]] | None = None,
                           text: str | None = None) -> list[Constituent]:
    """NP/VP/PP/ADVP/ADJP spans of a tree; see the module docstring for the rules.

    Give ``token_offsets`` (one (start, end) per non-trace leaf) or ``text`` to align to.
    """
    if isinstance(tree, str):
        tree = Tree.fromstring(tree)
    leaves = _leaves(tree)
    real = [i for i, (tag, _) in enumerate(leaves) if tag != TRACE_TAG]
    if token_offsets is None:
        if text is None:
            raise ValueError("constituents_from_tree needs token_offsets or text")
        token_offsets = align_leaves([leaves[i][1] for i in real], text)
    elif len(token_offsets) != len(real):
        raise ValueError(f"tree has {len(real)} leaves but {len(token_offsets)} token offsets were given")

    # Per leaf (traces included): its token index, or None for a trace; and whether it may
    # sit at a span's edge.
    token_of: list[int | None] = [None] * len(leaves)
    for tok, i in enumerate(real):
        token_of[i] = tok
    edge_ok = [tag not in PUNCT_TAGS and tag != TRACE_TAG and bool(word.strip()) for tag, word in leaves]

    found: list[Constituent] = []

    def walk(node: Tree, first: int) -> int:
        """Visit node, whose leaves start at leaf index first; return the index after them."""
        end = first + (1 if len(node) == 0 else 0)
        for child in node:
            end = walk(child, end) if isinstance(child, Tree) else end + 1
        lex = base_label(node.label())
        if lex in LEXICAL_TYPES:
            lo, hi = _trim(first, end, leaves, edge_ok)
            if lo < hi:
                start, stop = token_offsets[token_of[lo]][0], token_offsets[token_of[hi - 1]][1]
                if start < stop:
                    found.append(Constituent(start, stop, lex))
        return end

    walk(tree, 0)
    return dedupe(found)
