"""Property tests of the on-the-fly augmentation operators (pearl_model.pairs.augment)."""
from __future__ import annotations

import random
import string
from itertools import groupby

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_model.pairs import augment as A

SETTINGS = settings(max_examples=200, deadline=None)

# ---------------------------------------------------------------- strategies

WS = " \t\n\u00a0\u3000"
LETTERS = string.ascii_letters + "éßЖжΩλçÅ中\u212aİı"  # \u212a Kelvin: lower() is "k"
PUNCT = ",.;:!?-'\"()/&"
ALPHABET = LETTERS + string.digits + PUNCT + WS

word = st.text(alphabet=LETTERS, min_size=2, max_size=8)
token = st.one_of(
    word,
    st.text(alphabet=string.digits, min_size=1, max_size=4),  # "1997"
    st.sampled_from(["a", "I", "é", "1", ",", "--", "...", "(a)", "x2", "U.S.", "don't"]),
    st.text(alphabet=LETTERS + string.digits + PUNCT, min_size=1, max_size=6),
    st.characters(exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
)
gap = st.text(alphabet=WS, min_size=1, max_size=3)


@st.composite
def tokenised(draw):
    toks = draw(st.lists(token, min_size=1, max_size=6))
    out = draw(st.text(alphabet=WS, max_size=2))
    for i, t in enumerate(toks):
        out += (draw(gap) if i else "") + t
    return out + draw(st.text(alphabet=WS, max_size=2))


phrases = st.one_of(
    tokenised(),
    st.text(alphabet=ALPHABET, max_size=30),
    st.text(max_size=20),  # any unicode (no surrogates)
).filter(lambda s: s.strip() != "")
seeds = st.integers(min_value=0, max_value=2**32 - 1)

# ---------------------------------------------------------------- oracles


def lev(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def word_spans(s: str) -> list[tuple[int, int]]:
    """Alphabetic runs of length >= 2, computed independently of the module."""
    spans, i = [], 0
    for is_alpha, grp in groupby(s, key=str.isalpha):
        n = len(list(grp))
        if is_alpha and n >= 2:
            spans.append((i, i + n))
        i += n
    return spans


def in_word(s: str, i: int, inclusive_end: bool = False) -> bool:
    return any(a <= i < b or (inclusive_end and i == b) for a, b in word_spans(s))


def layout(s: str) -> list[str]:
    """The whitespace runs of s, in order, with empty markers for missing edges."""
    runs = ["".join(g) for sp, g in groupby(s, key=str.isspace) if sp]
    return [("" if not s[0].isspace() else "^")] + runs + [("" if not s[-1].isspace() else "$")]


def editable(tok: str) -> bool:
    return any(b - a >= 2 for a, b in word_spans(tok))


def check_common(kind: str, s: str, seed: int) -> str:
    op = A.ALL_OPS[kind]
    out = op(s, random.Random(seed))
    assert isinstance(out, str) and out.strip() != ""
    assert op(s, random.Random(seed)) == out  # deterministic
    assert A.augment(s, kind, random.Random(seed)) == out
    if A.can_change(s, kind):
        assert out != s
    else:
        assert out is s
    assert layout(out) == layout(s)
    assert len(out.split()) == len(s.split())
    return out


def check_char_op(kind: str, s: str, seed: int) -> str | None:
    out = check_common(kind, s, seed)
    if out is s:
        assert not word_spans(s) or kind in ("swap_chars", "keyboard_typo")
        return None
    before, after = s.split(), out.split()
    diff = [k for k in range(len(before)) if before[k] != after[k]]
    assert len(diff) == 1
    changed = before[diff[0]]
    assert editable(changed)
    assert not changed.isdigit() and len(changed) >= 2
    return out


# ---------------------------------------------------------------- properties


def test_qwerty_map_is_letters_only_and_symmetric():
    assert set(A.QWERTY_NEIGHBOURS) == set(string.ascii_lowercase)
    for k, ns in A.QWERTY_NEIGHBOURS.items():
        assert ns and k not in ns and len(set(ns)) == len(ns)
        for n in ns:
            assert n in string.ascii_lowercase and k in A.QWERTY_NEIGHBOURS[n]


@SETTINGS
@given(phrases, seeds)
def test_swap_chars(s, seed):
    out = check_char_op("swap_chars", s, seed)
    assert (out is None) == (not any(
        s[i] != s[i + 1] for a, b in word_spans(s) for i in range(a, b - 1)))
    if out is None:
        return
    assert len(out) == len(s)
    pos = [i for i in range(len(s)) if s[i] != out[i]]
    assert len(pos) == 2 and pos[1] == pos[0] + 1
    i = pos[0]
    assert out[i] == s[i + 1] and out[i + 1] == s[i]
    assert any(a <= i and i + 1 < b for a, b in word_spans(s))


@SETTINGS
@given(phrases, seeds)
def test_drop_char(s, seed):
    out = check_char_op("drop_char", s, seed)
    if out is None:
        return
    assert lev(s, out) == 1 and len(out) == len(s) - 1
    assert any(out == s[:i] + s[i + 1:] and in_word(s, i) for i in range(len(s)))


@SETTINGS
@given(phrases, seeds)
def test_insert_char(s, seed):
    out = check_char_op("insert_char", s, seed)
    if out is None:
        return
    assert lev(s, out) == 1 and len(out) == len(s) + 1
    assert any(out[:i] + out[i + 1:] == s and out[i] in string.ascii_lowercase
               and in_word(s, i, inclusive_end=True) for i in range(len(out)))


@SETTINGS
@given(phrases, seeds)
def test_keyboard_typo(s, seed):
    out = check_char_op("keyboard_typo", s, seed)
    eligible = [i for i in range(len(s)) if in_word(s, i) and s[i] in string.ascii_letters]
    assert (out is None) == (not eligible)
    if out is None:
        return
    assert lev(s, out) == 1 and len(out) == len(s)
    (i,) = [i for i in range(len(s)) if s[i] != out[i]]
    assert i in eligible
    assert out[i].lower() in A.QWERTY_NEIGHBOURS[s[i].lower()]
    assert out[i].isupper() == s[i].isupper() and out[i].isascii()


@SETTINGS
@given(phrases, seeds)
def test_swap_tokens(s, seed):
    out = check_common("swap_tokens", s, seed)
    before, after = s.split(), out.split()
    can = any(before[k] != before[k + 1] for k in range(len(before) - 1))
    assert (out is not s) == can
    assert sorted(after) == sorted(before)
    if not can:
        return
    pos = [k for k in range(len(before)) if before[k] != after[k]]
    assert len(pos) == 2 and pos[1] == pos[0] + 1
    k = pos[0]
    assert after[k] == before[k + 1] and after[k + 1] == before[k]


@SETTINGS
@given(phrases, seeds)
def test_change_case(s, seed):
    out = check_common("change_case", s, seed)
    assert (out is s) == (s.lower() == s == s.upper())  # a phrase without cased letters has no other case
    assert out.casefold() == s.casefold() or out.upper() == s.upper()  # only the case changed ("ı" -> "I" -> "i")


def test_change_case_forms():
    got = {A.change_case("o'neill lake", random.Random(i)) for i in range(40)}
    assert got == {"O'NEILL LAKE", "O'neill Lake", "O'neill lake"}  # a word starts after whitespace only


@SETTINGS
@given(phrases, seeds)
def test_random_on_the_fly(s, seed):
    kind, out = A.random_on_the_fly(s, random.Random(seed))
    assert A.random_on_the_fly(s, random.Random(seed)) == (kind, out)
    possible = [k for k in A.ALL_OPS if A.can_change(s, k)]
    if kind is None:
        assert not possible and out is s
        return
    assert kind in possible and out != s and out.strip() != ""
    rng = random.Random(seed)
    assert rng.choice(possible) == kind
    assert A.augment(s, kind, rng) == out


@pytest.mark.parametrize("kind", list(A.CHAR_OPS))
@SETTINGS
@given(st.lists(st.sampled_from(["1997", "a", "I", "42", ",", "é", "--", "3.14", "A."]),
                min_size=1, max_size=6), gap, seeds)
def test_char_ops_leave_digits_and_single_letters_alone(kind, toks, sep, seed):
    s = sep.join(toks)
    assert A.augment(s, kind, random.Random(seed)) is s
    assert not A.can_change(s, kind)


def test_random_on_the_fly_uses_all_kinds():
    seen = {A.random_on_the_fly("Hello brave world", random.Random(i))[0] for i in range(200)}
    assert seen == set(A.ALL_OPS)


# ---------------------------------------------------------------- known examples

EXAMPLES = [
    ("swap_chars", "hello world", "hello wordl"),
    ("drop_char", "hello world", "hello wrld"),
    ("insert_char", "hello world", "hello yworld"),
    ("keyboard_typo", "hello world", "hello wlrld"),
    ("swap_tokens", "hello world", "world hello"),
    ("keyboard_typo", "Hello, World!", "Hello, Wlrld!"),
    ("swap_chars", "New York 1997", "New Yrok 1997"),
    ("swap_tokens", "a I 1997 ,.", "a 1997 I ,."),
    ("swap_chars", "ab", "ba"),
    ("drop_char", "ab", "a"),
    ("change_case", "lithium carbonate", "Lithium Carbonate"),
    ("change_case", "LONDON", "London"),
]


@pytest.mark.parametrize("kind,phrase,expected", EXAMPLES)
def test_known_examples(kind, phrase, expected):
    assert A.augment(phrase, kind, random.Random(0)) == expected


UNCHANGED = [(k, p) for k in A.CHAR_OPS for p in ("1997", "a", "I", "a I 1997 ,.", "x  x", "ñ")]
UNCHANGED += [("swap_chars", "aa"), ("swap_chars", "zz 1997 a"),
              ("keyboard_typo", "éñ 42"), ("keyboard_typo", "\u212a\u212a İı"),
              ("swap_tokens", "hello"), ("swap_tokens", "  x  x\tx "), ("swap_tokens", "1997"),
              ("change_case", "1997 ,."), ("change_case", "中文")]


@pytest.mark.parametrize("kind,phrase", UNCHANGED)
def test_unchanged_returns_same_object(kind, phrase):
    assert not A.can_change(phrase, kind)
    assert A.augment(phrase, kind, random.Random(0)) is phrase


def test_swap_tokens_skips_identical_pairs_and_keeps_whitespace():
    for seed in range(20):
        assert A.swap_tokens("the the\t cat", random.Random(seed)) == "the cat\t the"
    assert A.swap_tokens("  one  ", random.Random(0)) == "  one  "


def test_random_on_the_fly_none():
    assert A.random_on_the_fly("1 2 1", random.Random(0))[0] == "swap_tokens"
    assert A.random_on_the_fly("7", random.Random(0)) == (None, "7")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("kind", list(A.ALL_OPS))
@pytest.mark.parametrize("bad,name",
                         [(None, "NoneType"), (3, "int"), (b"abc", "bytes"), (["ab"], "list")])
def test_non_string_raises_type_error(kind, bad, name):
    with pytest.raises(TypeError, match=name):
        A.augment(bad, kind, random.Random(0))
    with pytest.raises(TypeError, match=name):
        A.random_on_the_fly(bad, random.Random(0))


@pytest.mark.parametrize("kind", list(A.ALL_OPS))
@pytest.mark.parametrize("empty", ["", "   ", "\t\n"])
def test_empty_raises_value_error(kind, empty):
    with pytest.raises(ValueError):
        A.augment(empty, kind, random.Random(0))
    with pytest.raises(ValueError):
        A.random_on_the_fly(empty, random.Random(0))


def test_unknown_kind_and_bad_rng():
    with pytest.raises(ValueError, match="unknown augmentation kind 'shuffle'.*swap_chars"):
        A.augment("hello", "shuffle", random.Random(0))
    with pytest.raises(ValueError, match="unknown"):
        A.can_change("hello", None)
    with pytest.raises(TypeError, match="int"):
        A.drop_char("hello", 0)
