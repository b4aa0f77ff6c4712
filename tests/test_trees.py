"""Constituents from fixed PTB trees: every offset is checked by slicing the sentence."""
from __future__ import annotations

import pytest
from nltk.tree import Tree

from pearl_model.phrases.trees import align_leaves, base_label, constituents_from_tree


def phrases(tree, text, **kw):
    """(lexical type, phrase text) per constituent, in the order returned."""
    cs = constituents_from_tree(tree, text=text, **kw)
    for c in cs:
        assert 0 <= c.start < c.end <= len(text) and c.head is None
    return [(c.lexical_type, text[c.start:c.end]) for c in cs]


ALL_TYPES = ("(S (NP-SBJ (PRP She)) (ADVP (RB quickly)) (VP (VBD became) (ADJP-PRD (RB very) (JJ happy))"
             " (PP-LOC (IN in) (NP (NNP Paris)))) (. .))")
ALL_TYPES_TEXT = "She quickly became very happy in Paris."


def test_every_lexical_type_and_nesting():
    assert phrases(ALL_TYPES, ALL_TYPES_TEXT) == [
        ("NP", "She"),
        ("ADVP", "quickly"),
        ("VP", "became very happy in Paris"),
        ("ADJP", "very happy"),
        ("PP", "in Paris"),
        ("NP", "Paris"),
    ]


def test_nested_np_in_pp_in_vp_offsets():
    text = "The cat sat on the old mat."
    tree = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (JJ old) (NN mat)))) (. .))"
    cs = {(c.lexical_type, text[c.start:c.end]): c for c in constituents_from_tree(tree, text=text)}
    vp, pp, np_ = cs["VP", "sat on the old mat"], cs["PP", "on the old mat"], cs["NP", "the old mat"]
    assert (vp.start, vp.end) == (8, 26) and (pp.start, pp.end) == (12, 26) and (np_.start, np_.end) == (15, 26)
    assert vp.start < pp.start < np_.start and np_.end == pp.end == vp.end
    assert ("NP", "The cat") in cs


def test_token_offsets_used_as_given():
    # Same tree as above, offsets handed over (as the benepar backend does): leaf spellings
    # are not consulted, so an escaped or normalised leaf cannot shift anything.
    text = "She  quickly became very happy in Paris ."  # two spaces, spaced-out period
    words = text.split()
    offsets, pos = [], 0
    for w in words:
        pos = text.index(w, pos)
        offsets.append((pos, pos + len(w)))
        pos += len(w)
    cs = constituents_from_tree(Tree.fromstring(ALL_TYPES), token_offsets=offsets)
    assert [(c.lexical_type, text[c.start:c.end]) for c in cs][:3] == [
        ("NP", "She"), ("ADVP", "quickly"), ("VP", "became very happy in Paris")]
    with pytest.raises(ValueError, match="8 leaves but 7"):
        constituents_from_tree(ALL_TYPES, token_offsets=offsets[:-1])


def test_punctuation_stripped_at_edges_only():
    text = "the dog, Rex, barked."
    tree = "(S (NP (NP (DT the) (NN dog)) (, ,) (NP (NNP Rex)) (, ,)) (VP (VBD barked)) (. .))"
    assert phrases(tree, text) == [("NP", "the dog, Rex"), ("NP", "the dog"), ("NP", "Rex"), ("VP", "barked")]


def test_node_of_only_punctuation_dropped():
    text = "Yes . ."
    assert phrases("(S (ADVP (UH Yes) (. .)) (VP (. .)))", text) == [("ADVP", "Yes")]


def test_functional_tags_and_indices():
    assert base_label("NP-SBJ") == "NP" and base_label("NP=2") == "NP" and base_label("PP-LOC-CLR=3") == "PP"
    assert base_label("-NONE-") == "-NONE-" and base_label("-LRB-") == "-LRB-"
    text = "He left on Monday."
    tree = "(S (NP-SBJ-1 (PRP He)) (VP=2 (VBD left) (PP-TMP (IN on) (NP (NNP Monday)))) (. .))"
    assert phrases(tree, text) == [("NP", "He"), ("VP", "left on Monday"), ("PP", "on Monday"), ("NP", "Monday")]


def test_traces_take_no_text_and_empty_nodes_dropped():
    # PTB: "What did he see *T*-1 ?" with a whole NP made of a trace.
    text = "What did he see?"
    tree = ("(SBARQ (WHNP-1 (WP What)) (SQ (VBD did) (NP-SBJ (PRP he)) (VP (VB see) (NP (-NONE- *T*-1))))"
            " (. ?))")
    assert phrases(tree, text) == [("NP", "he"), ("VP", "see")]
    # A trace at a span's edge is stripped like punctuation.
    text2 = "He tried to leave."
    tree2 = ("(S (NP-SBJ-1 (PRP He)) (VP (VBD tried) (S (NP-SBJ (-NONE- *-1)) (VP (TO to) (VP (VB leave)))))"
             " (. .))")
    assert phrases(tree2, text2) == [("NP", "He"), ("VP", "tried to leave"), ("VP", "to leave"), ("VP", "leave")]


def test_ptb_escapes_aligned_to_raw_text():
    text = "Apple (AAPL) rose 5%."
    tree = ("(S (NP (NP (NNP Apple)) (PRN (-LRB- -LRB-) (NP (NNP AAPL)) (-RRB- -RRB-)))"
            " (VP (VBD rose) (NP (CD 5) (NN %))) (. .))")
    # The closing bracket stays: its opener is inside the phrase.
    assert phrases(tree, text) == [("NP", "Apple (AAPL)"), ("NP", "Apple"), ("NP", "AAPL"),
                                   ("VP", "rose 5%"), ("NP", "5%")]


def test_quotes_and_bracket_pairs():
    quoted = "(NP (`` ``) (NNP Star) (NNP Wars) ('' ''))"
    assert phrases(quoted, '"Star Wars"') == [("NP", "Star Wars")]
    assert phrases(quoted, "\u201cStar Wars\u201d") == [("NP", "Star Wars")]
    assert phrases(quoted, "``Star Wars''") == [("NP", "Star Wars")]
    assert phrases("(NP (`` ``) (NNP Star) (NNP Wars) ('' '') (NN film) (, ,))", '"Star Wars" film,') == [
        ("NP", '"Star Wars" film')]
    assert phrases("(NP (-LRB- -LRB-) (NNP AAPL) (-RRB- -RRB-))", "(AAPL)") == [("NP", "AAPL")]
    assert phrases("(NP (NNP Dash) (: --) (NNP Board))", "Dash\u2014Board") == [("NP", "Dash\u2014Board")]


def test_unary_chains_deduplicated():
    text = "Rain fell."
    # NP over NP over one noun; VP over VP over one verb.
    tree = "(S (NP (NP (NN Rain))) (VP (VP (VBD fell))) (. .))"
    assert phrases(tree, text) == [("NP", "Rain"), ("VP", "fell")]
    # Different types over the same span: the first in LEXICAL_TYPES order wins (NP before ADVP).
    assert phrases("(S (ADVP (NP (NN today))) (VP (VBD ended)))", "today ended") == [
        ("NP", "today"), ("VP", "ended")]


def test_outer_empty_bracket_and_whitespace_leaf():
    # PTB files wrap trees in "( ... )"; benepar prints a whitespace token as "(_SP  )".
    assert phrases("( (S (NP (NNS Dogs)) (VP (VBP bark)) (. .)) )", "Dogs bark.") == [
        ("NP", "Dogs"), ("VP", "bark")]
    text = "Dogs  bark loudly"
    tree = "(S (NP (NNS Dogs) (_SP  )) (VP (VBP bark) (ADVP (RB loudly))))"
    offsets = [(0, 4), (4, 5), (6, 10), (11, 17)]
    cs = constituents_from_tree(tree, token_offsets=offsets)
    assert [(c.lexical_type, text[c.start:c.end]) for c in cs] == [
        ("NP", "Dogs"), ("VP", "bark loudly"), ("ADVP", "loudly")]


def test_missing_leaf_is_an_error_not_a_shift():
    with pytest.raises(ValueError, match="'cat' not found"):
        constituents_from_tree("(NP (DT the) (NN cat))", text="the dog")
    with pytest.raises(ValueError, match="token_offsets or text"):
        constituents_from_tree("(NP (DT the) (NN cat))")
    assert align_leaves(["a", "", "-LRB-", "b"], "a (b") == [(0, 1), (1, 1), (2, 3), (3, 4)]
