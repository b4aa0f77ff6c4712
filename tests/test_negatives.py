"""Hard-negative mining: blocking bound, lossless candidate generation, negative selection."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, Levenshtein

from pearl_model.pairs import negatives as N

# ---------------------------------------------------------------- a real-looking phrase corpus

ENTITIES = [
    "The New York Times", "The Washington Post", "Los Angeles Times", "The Wall Street Journal",
    "Financial Times", "The Guardian", "Le Monde", "Der Spiegel", "Associated Press", "Reuters",
    "United Nations", "European Union", "World Health Organization", "Red Cross",
    "International Monetary Fund", "Bank of England", "Federal Reserve", "Deutsche Bank",
    "Goldman Sachs", "Microsoft", "Apple Inc.", "Google", "Amazon", "Tesla Motors", "Toyota",
    "Volkswagen Group", "General Electric", "Harvard University", "Stanford University",
    "University of Oxford", "Massachusetts Institute of Technology", "Sorbonne University",
    "Barack Obama", "Angela Merkel", "Winston Churchill", "Albert Einstein", "Marie Curie",
    "Leonardo da Vinci", "William Shakespeare", "Johann Sebastian Bach", "Ludwig van Beethoven",
    "Pablo Picasso", "Eiffel Tower", "Statue of Liberty", "Golden Gate Bridge", "Mount Everest",
    "Amazon River", "Pacific Ocean", "Sahara Desert", "Great Barrier Reef", "Buenos Aires",
    "Rio de Janeiro", "San Francisco", "Los Angeles", "New Orleans", "Saint Petersburg",
    "Manchester United", "Real Madrid", "FC Barcelona", "New York Yankees", "Chicago Bulls",
    "World War II", "French Revolution", "Industrial Revolution", "Cold War", "Olympic Games",
    "Nobel Prize in Physics", "Academy Award for Best Picture", "Super Bowl", "Tour de France",
]
NOUN_PHRASES = [
    "machine translation", "natural language processing", "phrase embedding", "neural network",
    "climate change", "interest rate", "stock market", "public health", "civil rights movement",
    "prime minister", "supreme court", "board of directors", "high school", "graduate student",
    "police station", "fire department", "city council", "national park", "art museum",
    "train station", "football club", "research laboratory", "data set", "search engine",
    "operating system", "power plant", "solar panel", "electric car", "gene expression",
    "protein folding",
]
EXTRA_WORDS = ["new", "old", "national", "royal", "first", "great", "the", "of", "city", "group",
               "company", "international", "american", "british", "modern", "early", "state"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _typo(p: str, r: random.Random) -> str:
    i, op = r.randrange(len(p)), r.randrange(4)
    if op == 0:
        return p[:i] + p[i + 1:]
    if op == 1:
        return p[:i] + r.choice(LETTERS) + p[i:]
    if op == 2:
        return p[:i] + r.choice(LETTERS) + p[i + 1:]
    return p[:i] + p[i + 1:i + 2] + p[i:i + 1] + p[i + 2:]  # swap with the next character


def _variant(p: str, r: random.Random) -> str:
    words, op = p.split(), r.randrange(3)
    if op == 0 and len(words) > 1:
        del words[r.randrange(len(words))]
    elif op == 1:
        words.insert(r.randrange(len(words) + 1), r.choice(EXTRA_WORDS))
    else:
        return _typo(p, r)
    return " ".join(words)


def corpus(seed: int = 0, per: int = 3) -> list[str]:
    """400 phrases: every base phrase plus `per` variants (1-2 typos / added / removed words)."""
    r, out = random.Random(seed), []
    for base in ENTITIES + NOUN_PHRASES:
        out.append(base)
        for _ in range(per):
            p = base
            for _ in range(r.randint(1, 2)):
                p = _variant(p, r)
            out.append(p)
    return out


@pytest.fixture(scope="module")
def phrases() -> list[str]:
    return corpus()


def _pairs(found):
    return {(a, b) for a, b, _ in found}


def _multiset_overlap(a: str, b: str, q: int) -> int:
    return len(set(N.qgram_tokens(a, q)) & set(N.qgram_tokens(b, q)))


# ---------------------------------------------------------------- edit similarity and the bound

def test_edit_similarity_is_fuzz_ratio_of_the_normal_forms():
    assert N.normalize("  The\tNew  York\x00Times ") == "the new york times"
    for a, b in [("The New York Times", "the new york review"), ("ab", "ba"), ("Paris", "Parsi")]:
        assert N.edit_similarity(a, b) == pytest.approx(fuzz.ratio(N.normalize(a), N.normalize(b)) / 100)
    # Indel ratio, not Levenshtein.normalized_similarity: a transposition costs 2 indels.
    assert N.edit_similarity("ab", "ba") == 0.5
    assert Levenshtein.normalized_similarity("ab", "ba") == 0.0


def test_qgram_tokens_pad_and_number_repeats():
    assert N.qgram_tokens("aaa", 2) == ["\x02a\x1f0", "aa\x1f0", "aa\x1f1", "a\x03\x1f0"]
    assert N.qgram_tokens("ab", 1) == ["a\x1f0", "b\x1f0"]
    assert len(N.qgram_tokens("new york", 3)) == len("new york") + 2


@settings(max_examples=300, deadline=None)
@given(st.text("abc ", max_size=14), st.text("abc ", max_size=14), st.sampled_from([1, 2, 3]))
def test_qgram_lemma_holds(a, b, q):
    """|G_q(a) & G_q(b)| >= (2q-1)L - (q-1)(m+n) + q - 1, L the LCS length."""
    m, n = len(a), len(b)
    lcs = (m + n - Indel.distance(a, b)) // 2
    assert _multiset_overlap(a, b, q) >= (2 * q - 1) * lcs - (q - 1) * (m + n) + q - 1


def test_min_overlap_is_tight_and_3grams_fail_at_0_7():
    a, b = "oabpcdqefrghsijtklmn", "awbcxdeyfgzhijklumnv"  # core "abcdefghijklmn" + 6 each
    assert Indel.normalized_similarity(a, b) == pytest.approx(0.7)
    assert N.min_overlap(20, 0.7, 2) == 3
    assert _multiset_overlap(a, b, 2) == 3          # the bigram bound is attained
    assert _multiset_overlap(a, b, 3) == 0          # no 3-gram key could ever join them
    assert N.min_overlap(20, 0.7, 3) < 1
    with pytest.raises(ValueError, match="no shared 3-gram"):
        N.blocking_keys(a, Counter(), 0.7, q=3)
    counts = N.gram_counts([a, b])
    assert set(N.blocking_keys(a, counts)) & set(N.blocking_keys(b, counts))


def test_blocking_keys_are_the_rarest_prefix():
    phrases = ["new york", "new york times", "york minster", "newark"]
    counts = N.gram_counts(phrases)
    keys = N.blocking_keys("New  York", counts)
    tokens = N.qgram_tokens("new york", 2)
    assert len(keys) == len(tokens) - N.min_overlap(8, 0.7, 2) + 1
    assert keys == sorted(tokens, key=lambda t: (counts[t], t))[:len(keys)]
    assert N.blocking_keys(" \t", counts) == []


def test_gram_counts_merge_like_one_pass(phrases):
    parts = [N.gram_counts(phrases[i:i + 97]) for i in range(0, len(phrases), 97)]
    assert N.merge_gram_counts(parts) == N.gram_counts(phrases)


# ---------------------------------------------------------------- candidate generation

def test_blocking_finds_every_brute_force_pair(phrases):
    n = len(phrases)
    expected = N.brute_force_candidates(phrases, 0.7)
    found, stats = N.blocked_candidates(phrases, 0.7)
    assert len(expected) > 150
    assert found == expected                           # same pairs, same similarities
    assert stats.pairs_skipped == 0 and stats.candidates == len(expected)
    # At t=0.7 the guarantee is only 2-5 shared bigrams, so pruning is modest; it is strong
    # higher up. Both bounds are measured ~0.64 and ~0.10 on this corpus.
    assert stats.pairs_compared < 0.75 * n * (n - 1) / 2
    found_85, stats_85 = N.blocked_candidates(phrases, 0.85)
    assert found_85 == N.brute_force_candidates(phrases, 0.85)
    assert stats_85.pairs_compared < 0.15 * n * (n - 1) / 2


def test_capped_blocks_cost_linear_and_count_what_they_skip(phrases):
    expected = _pairs(N.brute_force_candidates(phrases))
    found, stats = N.blocked_candidates(phrases, max_block=6)
    assert stats.split_blocks > 0 and stats.pairs_skipped > 0
    assert stats.pairs_compared <= stats.keys * (6 - 1)
    assert _pairs(found) <= expected
    assert len(expected - _pairs(found)) <= stats.pairs_skipped
    assert len(_pairs(found)) > 0.9 * len(expected)   # nearest-in-length keeps most


def test_threshold_is_respected(phrases):
    for threshold in (0.7, 0.8):
        found, _ = N.blocked_candidates(phrases, threshold)
        for a, b, s in found:
            assert s >= threshold
            assert s == pytest.approx(N.edit_similarity(phrases[a], phrases[b]), abs=1e-12)
    exact = ["abcdefghij", "abcdefgxyz"]                   # ratio exactly 0.7: inclusive
    assert [(a, b) for a, b, _ in N.blocked_candidates(exact, 0.7)[0]] == [(0, 1)]
    assert N.blocked_candidates(exact, 0.71)[0] == []


def test_candidate_pairs_of_one_block():
    block = [(7, "The New York Times"), (3, "the new york times"), (5, "The New York Review"),
             (9, ""), (1, "Los Angeles Times"), (2, "The New-York Times")]
    stats = N.CandidateStats()
    pairs = N.candidate_pairs(block, 0.7, stats=stats)
    keys = [(a, b) for a, b, _ in pairs]
    assert all(a < b for a, b in keys) and len(keys) == len(set(keys))
    assert (3, 7) not in keys                              # same normal form: same phrase
    assert {(5, 7), (3, 5), (2, 7), (2, 3), (2, 5)} == set(keys)
    assert stats.blocks == 1 and stats.largest_block == 5 and stats.pairs_compared > 0
    assert N.candidate_pairs([(1, "abc")], 0.7) == []


def test_length_filter_skips_impossible_partners():
    assert N.max_partner_length(7, 0.7) == 13              # 2*7/(7+13) = 0.7 exactly
    block = [(0, "a" * 7), (1, "a" * 7 + "b" * 6), (2, "a" * 7 + "b" * 7)]
    stats = N.CandidateStats()
    assert [(a, b) for a, b, _ in N.candidate_pairs(block, 0.7, stats=stats)] == [(0, 1), (1, 2)]
    assert stats.pairs_compared == 2                       # (0, 2) never scored


def test_top_candidates_dedupes_across_blocks():
    pairs = [(1, 4, 0.8), (4, 1, 0.8), (1, 2, 0.9), (2, 1, 0.9), (3, 1, 0.75), (1, 5, 0.75),
             (2, 3, 0.99), (1, 1, 1.0)]
    assert N.top_candidates(1, pairs) == [(2, 0.9), (4, 0.8), (3, 0.75), (5, 0.75)]
    assert N.top_candidates(1, pairs, max_candidates=2) == [(2, 0.9), (4, 0.8)]
    assert N.top_candidates(6, pairs) == []
    assert list(N.both_directions([(1, 2, 0.8)])) == [(1, 2, 0.8), (2, 1, 0.8)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text("ab c", max_size=12), max_size=25),
       st.sampled_from([0.67, 0.7, 0.75, 0.8, 0.9]), st.sampled_from([1, 2]))
def test_blocking_loses_nothing_on_random_strings(strings, threshold, q):
    found, _ = N.blocked_candidates(strings, threshold, q=q)
    assert _pairs(found) >= _pairs(N.brute_force_candidates(strings, threshold))
    assert found == N.brute_force_candidates(strings, threshold)


# ---------------------------------------------------------------- selection

def test_select_negatives_known_answer():
    query = np.array([2.0, 0.0])
    cands = np.array([[0.9, 0.19 ** 0.5], [0.5, 0.75 ** 0.5], [1.4, 2 * 0.51 ** 0.5]])
    assert N.cosine_scores(query, cands) == pytest.approx([0.9, 0.5, 0.7])
    # cos_norm = [1, 0, 0.5] (min-max over the list); scores = edit - cos_norm = [-.1, .75, .35]
    edit = [0.9, 0.75, 0.85]
    idx, scores = N.select_negatives(query, cands, edit, margin=0.3, k=2)
    assert idx.tolist() == [1, 2] and scores == pytest.approx([0.75, 0.35])
    assert N.select_negatives(query, cands, edit, margin=0.3, k=1)[0].tolist() == [1]
    assert N.select_negatives(query, cands, edit, margin=0.4, k=2)[0].tolist() == [1]
    assert N.select_negatives(query, cands, edit, k=0)[0].tolist() == []
    # ties on the score keep the candidate order
    idx, _ = N.rank_negatives(np.array([0.2, 0.9, 0.2]), [0.8, 0.9, 0.8], k=3)
    assert idx.tolist() == [0, 2]


def test_select_negatives_degenerate_cases():
    q = np.array([1.0, 0.0])
    # one candidate: its raw cosine, clipped to [0, 1], stands in for cos_norm
    assert N.select_negatives(q, np.array([[1.0, 0.1]]), [0.9])[0].tolist() == []    # synonym
    idx, s = N.select_negatives(q, np.array([[0.0, 1.0]]), [0.8])                     # cos 0
    assert idx.tolist() == [0] and s == pytest.approx([0.8])
    idx, s = N.select_negatives(q, np.array([[-1.0, 0.2]]), [0.75])                   # cos < 0
    assert idx.tolist() == [0] and s == pytest.approx([0.75])
    # all cosines equal (0.6): no spread, each scored edit_sim - 0.6
    cands = np.array([[0.6, 0.8], [0.6, -0.8], [0.6, 0.8]])
    idx, s = N.select_negatives(q, cands, [0.95, 0.85, 0.92], k=5)
    assert idx.tolist() == [0, 2] and s == pytest.approx([0.35, 0.32])
    assert N.normalise_cosines(np.array([0.2, 0.2])).tolist() == [0.2, 0.2]
    # a zero vector has cosine 0; no candidates, no negatives
    assert N.cosine_scores(q, np.array([[0.0, 0.0], [1.0, 0.0]])).tolist() == [0.0, 1.0]
    idx, s = N.select_negatives(q, np.zeros((0, 2)), [])
    assert idx.size == 0 and s.size == 0
    with pytest.raises(ValueError):
        N.select_negatives(q, np.array([[1.0, 0.0]]), [0.8, 0.9])


def test_semantic_neighbours_match_numpy():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(50, 8))
    sims, idx = N.semantic_neighbours(vecs, 5)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    exact = unit @ unit.T
    assert (idx[:, 0] == np.arange(50)).all()
    np.testing.assert_allclose(sims, -np.sort(-exact, axis=1)[:, :5], atol=1e-5)
    sims_q, idx_q = N.semantic_neighbours(vecs, 80, queries=vecs[3])
    assert idx_q.shape == (1, 50) and idx_q[0, 0] == 3


# ---------------------------------------------------------------- end to end

# axes: NY Times, NY Post, NY Review, the city, LA Times
NY_VECTORS = {
    "The New York Times": [1, 0, 0, 0.1, 0], "New York Times": [1, 0, 0, 0.1, 0],
    "The New-York Times": [0.98, 0, 0, 0.12, 0], "NYT": [1, 0, 0, 0, 0],
    "The New York Review": [0.1, 0, 1, 0.1, 0], "The New York Post": [0, 1, 0, 0.1, 0],
    "New York Post": [0, 1, 0, 0.1, 0], "New York": [0.2, 0.1, 0, 1, 0],
    "Los Angeles Times": [0.3, 0, 0, 0, 1],
}


def test_new_york_hard_negatives():
    phrases, calls = list(NY_VECTORS), []

    def embed(batch):
        calls.append(list(batch))
        return np.array([NY_VECTORS[p] for p in batch], dtype=np.float32)

    result = dict(zip(phrases, N.mine_negatives(phrases, embed, threshold=0.7, k=2)))
    assert len(calls) == 1
    # candidates of "The New York Times": New York Times (.875), The New-York Times (.944),
    # The New York Review (.811), The New York Post (.80); the two synonyms have cos_norm 1.
    assert [neg for neg, _, _ in result["The New York Times"]] == ["The New York Post",
                                                                   "The New York Review"]
    neg, sim, cos = result["The New York Times"][1]
    assert sim == pytest.approx(0.8108, abs=1e-4) and cos == pytest.approx(0.1084, abs=1e-3)
    times = {"The New York Times", "New York Times", "The New-York Times", "NYT"}
    for phrase in times:
        assert not times & {neg for neg, _, _ in result[phrase]}
    assert result["NYT"] == [] and result["Los Angeles Times"] == []
    # "New York Post" is only 0.645 from "The New York Times": a candidate at t=0.6 (q=1 there)
    loose = dict(zip(phrases, N.mine_negatives(phrases, embed, threshold=0.6, k=5)))
    assert "New York Post" in {neg for neg, _, _ in loose["The New York Times"]}


def test_mine_negatives_checks_embed_shape():
    with pytest.raises(ValueError, match="embed returned"):
        N.mine_negatives(["New York Times", "New York Post"], lambda b: np.zeros((1, 3)))
    assert N.mine_negatives(["abc", "xyz"], lambda b: 1 / 0) == [[], []]  # no candidates, no call


def test_blocking_equals_brute_force_on_a_few_thousand_real_names():
    """YAGO mentions and their canonical names from the PEARL benchmark: 4,000 real phrases."""
    from pearl_model.evaluation import data

    bench = data.default_benchmark_dir()
    if bench is None:
        pytest.skip("the PEARL benchmark files (../shared/benchmarks/pearl) are not here")
    mentions, names = data.load_retrieval(bench, "yago")[:2]
    phrases = list(dict.fromkeys(list(mentions)[:2500] + list(names)[:1500]))
    blocked, stats = N.blocked_candidates(phrases, 0.7)
    exact = N.brute_force_candidates(phrases, 0.7)
    assert [(a, b) for a, b, _ in blocked] == [(a, b) for a, b, _ in exact]
    assert len(exact) > 100
    assert stats.pairs_compared < len(phrases) * (len(phrases) - 1) // 2
